#!/usr/bin/env node
// Reference token ids from Hugging Face `tokenizers` (npm 0.23.2, .deps/node_modules) for the
// C++ tokenizer tests.
//
//   node scripts/tokenizer_oracle.js --tokenizer T.json --mode plain|special --list FILES --out OUT
//     Encodes every file named in FILES (one path per line, read as UTF-8 with invalid bytes
//     replaced by U+FFFD) without post-processing (no BOS). Output, little-endian:
//     "EFIMORC1", u32 file count, then per file u32 n and n x i32 ids.
//     --mode special: the tokenizer as shipped (every added token is split out of the text).
//     --mode plain:   efim's default for user text: special added tokens, and FIM sentinels
//                     even when marked special=false, are not split out, so their spelling is
//                     tokenized as ordinary text. Done by replacing their content with a string
//                     that cannot occur in the corpus (U+FDD0, a noncharacter, and the id):
//                     removing them would make Hugging Face renumber the other added tokens.
//   node scripts/tokenizer_oracle.js --tokenizer T.json --decode IDS.json --out OUT.json
//     IDS.json: [[ids...], ...]; OUT.json: [[text, text_skipping_special], ...].
'use strict';
const fs = require('fs');
const path = require('path');

const FIM_SENTINELS = new Set([
  '<fim_prefix>', '<fim_suffix>', '<fim_middle>', '<fim_pad>', '<repo_name>', '<file_sep>',
  '<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>', '<|fim_pad|>', '<|repo_name|>',
  '<|file_sep|>', '<｜fim▁begin｜>', '<｜fim▁hole｜>', '<｜fim▁end｜>', '<PRE>', '<SUF>', '<MID>',
]);

function parseArgs(argv) {
  const args = {};
  for (let i = 2; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) throw new Error(`bad argument ${argv[i]}`);
    args[argv[i].slice(2)] = argv[i + 1];
  }
  return args;
}

function loadTokenizers() {
  const root = path.resolve(__dirname, '..', '.deps', 'node_modules', 'tokenizers');
  if (!fs.existsSync(root)) throw new Error(`npm tokenizers missing at ${root}: run scripts/deps.sh`);
  return require(root);
}

function makeTokenizer(Tokenizer, file, mode) {
  if (mode === 'special') return Tokenizer.fromFile(file);
  if (mode !== 'plain') throw new Error(`unknown --mode ${mode}`);
  const j = JSON.parse(fs.readFileSync(file, 'utf8'));
  for (const t of j.added_tokens || []) {
    if (t.special || FIM_SENTINELS.has(t.content)) t.content = `\uFDD0efim-unparsed-${t.id}`;
  }
  return Tokenizer.fromString(JSON.stringify(j));
}

async function encodeFiles(tok, list, out) {
  const files = fs.readFileSync(list, 'utf8').split('\n').filter((l) => l.length > 0);
  const chunks = [];
  const head = Buffer.alloc(12);
  head.write('EFIMORC1', 0, 'latin1');
  head.writeUInt32LE(files.length, 8);
  chunks.push(head);
  const batch = 32;
  for (let b = 0; b < files.length; b += batch) {
    const texts = files.slice(b, b + batch).map((f) => fs.readFileSync(f, 'utf8'));
    const encs = await tok.encodeBatch(texts, { addSpecialTokens: false });
    for (const e of encs) {
      const ids = e.getIds();
      const buf = Buffer.alloc(4 + 4 * ids.length);
      buf.writeUInt32LE(ids.length, 0);
      for (let k = 0; k < ids.length; ++k) buf.writeInt32LE(ids[k], 4 + 4 * k);
      chunks.push(buf);
    }
  }
  const tmp = `${out}.${process.pid}.tmp`;  // tests may run in parallel
  fs.writeFileSync(tmp, Buffer.concat(chunks));
  fs.renameSync(tmp, out);
}

async function decodeIds(tok, idsFile, out) {
  const lists = JSON.parse(fs.readFileSync(idsFile, 'utf8'));
  const result = [];
  for (const ids of lists) result.push([await tok.decode(ids, false), await tok.decode(ids, true)]);
  const tmp = `${out}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(result));
  fs.renameSync(tmp, out);
}

async function main() {
  const args = parseArgs(process.argv);
  const { Tokenizer } = loadTokenizers();
  if (!args.tokenizer || !args.out) throw new Error('need --tokenizer and --out');
  if (args.decode) {
    await decodeIds(Tokenizer.fromFile(args.tokenizer), args.decode, args.out);
  } else {
    await encodeFiles(makeTokenizer(Tokenizer, args.tokenizer, args.mode || 'plain'), args.list, args.out);
  }
}

main().catch((e) => {
  console.error(`tokenizer_oracle: ${e.stack || e}`);
  process.exit(1);
});
