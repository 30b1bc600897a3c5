// The engine tests' fixture: a tiny random Llama (scripts/make_tiny_model.py, numpy required)
// loaded twice (the engine thread owns one, the reference decoding uses the other), greedy
// reference decoding with ContiguousSession, and helpers to submit batches.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <memory>
#include <vector>

#include "../model/model_test_util.h"
#include "engine/engine.h"

namespace efim {

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::require_numpy();
    test::make_tiny_model(dir_->path(), "llama", "f32");
    if (::testing::Test::HasFatalFailure()) return;
    LoadOptions lo;
    lo.n_threads = 1;
    model_ = Model::load(dir_->path(), lo).release();
    ref_model_ = Model::load(dir_->path(), lo).release();  // the engine thread owns model_
  }
  static void TearDownTestSuite() {
    delete model_;
    delete ref_model_;
    delete dir_;
  }
  void SetUp() override { ASSERT_NE(model_, nullptr) << "tiny model missing"; }

  // Greedy decoding of n tokens with the single-sequence reference path.
  static std::vector<int32_t> reference(const std::vector<int32_t>& prompt, int32_t n,
                                        DType kv = DType::F32) {
    ContiguousSession s(*ref_model_, 128, kv);
    std::vector<int32_t> out;
    std::vector<float> logits = s.eval(prompt);
    for (int32_t i = 0; i < n; ++i) {
      out.push_back(argmax(logits));
      if (i + 1 < n) logits = s.eval({out.back()});
    }
    return out;
  }

  static std::vector<int32_t> prompt(int32_t n, int32_t seed) {
    std::vector<int32_t> p(n);
    for (int32_t i = 0; i < n; ++i) p[i] = 3 + (seed * 131 + i * 37 + i * i * 7) % 290;
    return p;
  }

  static Request greedy(std::vector<int32_t> p, int32_t max_tokens) {
    Request r;
    r.prompt = std::move(p);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
  }

  static EngineOptions options(int32_t budget, int32_t n_blocks, int32_t block_size = 16) {
    EngineOptions o;
    o.scheduler.max_step_tokens = budget;
    o.kv.n_blocks = n_blocks;
    o.kv.block_size = block_size;
    return o;
  }

  // Holds the engine thread after its first step until every request of a batch is queued,
  // so the batch is scheduled together whatever the thread timing.
  struct StartGate {
    std::promise<void> reached, go;
    std::shared_future<void> go_f = go.get_future().share();
    int64_t steps = 0;
    size_t max_batch = 0;  // most sequences in one step; read after Engine::steps()
    EngineOptions attach(EngineOptions o) {
      o.on_step = [this](const StepPlan& p) {
        max_batch = std::max(max_batch, p.seqs.size());
        if (++steps == 1) {
          reached.set_value();
          go_f.wait();
        }
      };
      return o;
    }
  };

  // Submits all requests at once and checks every output against the reference. With a gate,
  // a 2-token opener request runs first and the others are queued while the gate holds.
  static std::vector<RequestResult> run_batch(Engine& e, const std::vector<Request>& reqs,
                                              StartGate* gate = nullptr, DType kv = DType::F32) {
    std::shared_ptr<RequestStream> opener;
    if (gate) {
      opener = e.submit(greedy(prompt(3, 99), 2));
      gate->reached.get_future().wait();
    }
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const Request& r : reqs) streams.push_back(e.submit(r));
    if (gate) {
      gate->go.set_value();
      EXPECT_EQ(opener->wait().tokens, reference(prompt(3, 99), 2, kv));
    }
    std::vector<RequestResult> results;
    for (size_t i = 0; i < reqs.size(); ++i) {
      results.push_back(streams[i]->wait());
      EXPECT_EQ(results[i].finish, FinishReason::length) << "request " << i;
      EXPECT_EQ(results[i].tokens, reference(reqs[i].prompt, reqs[i].max_tokens, kv))
          << "request " << i;
    }
    return results;
  }

  inline static test::TempDir* dir_ = nullptr;
  inline static Model* model_ = nullptr;
  inline static Model* ref_model_ = nullptr;
};

}  // namespace efim
