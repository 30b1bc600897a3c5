// A small HumanEval-infilling fixture with known right and wrong completions.
#pragma once

#include <string>

namespace efim::eval::fixture {

// Two tasks in the dataset's JSON-lines format.
inline std::string tasks_jsonl() {
  return R"({"task_id": "Fixture/0/L1", "entry_point": "add", "prompt": "def add(a, b):\n", "suffix": "    return c\n", "canonical_solution": "    c = a + b\n", "test": "\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"}
{"task_id": "Fixture/1/L2", "entry_point": "first_word", "prompt": "def first_word(s):\n    words = s.split()\n", "suffix": "    return w\n", "canonical_solution": "    w = words[0] if words else ''\n", "test": "\n\ndef check(candidate):\n    assert candidate('hello world') == 'hello'\n    assert candidate('') == ''\n"}
)";
}

}  // namespace efim::eval::fixture
