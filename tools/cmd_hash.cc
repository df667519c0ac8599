// `kvtier hash`: flag wiring over internal::RunHashQuery.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>

#include "cli/cli_text.h"
#include "cli/duration.h"
#include "cli/hash_command.h"
#include "cli/json_input.h"
#include "cli/ops_command.h"
#include "cli/sglang_hash.h"
#include "commands.h"
#include "io/io_watch.h"
#include "seal/seal_key.h"
#include "util/read_file.h"

namespace kvtier::internal {
namespace {

struct HashFlags {
  std::string input;
  std::string algo = "sha256";
  std::optional<std::string> seed;
  bool no_seed = false;
  std::string tokens;
  std::string tokens_file;
  uint32_t hash_block_size = 16;
  std::optional<std::string> model;
  std::string dtype = "bfloat16";
  uint32_t num_layers = 32;
  std::string layer_template = "model.layers.{}.self_attn.attn";
  uint32_t blocks_per_chunk = 1;
  uint32_t group = 0;
  int64_t tp = 1, pp = 1, pcp = 1, dcp = 1, rank = 0;
  bool not_agnostic = false;
  std::string namespace_config;
  std::optional<std::string> root;
  std::optional<std::string> lora;
  std::optional<std::string> salt;
  bool json = false;
  bool explain = false;
  std::string io_timeout = "30s";  // with --root: the deadline of each stat
  std::optional<std::string> seal_key_file;  // the sealed namespace's paths (L184)
  bool seal_key_group_read = false;          // L174: a group-readable key file is accepted
  // Whether --hash-block-size / --blocks-per-chunk were given (not defaults).
  bool hash_block_size_given = false;
  bool blocks_per_chunk_given = false;
  // --engine sglang: SGLang's page keys instead of vLLM's block hashes.
  std::string engine = "vllm";
  uint32_t page_size = 0;
  std::optional<std::string> prior_hash;
  std::optional<std::string> extra_key;
  SglangNamespaceFlags sg;  // --model, --dtype, --tp, --pp and --namespace-config are copied in
  std::string given_flag_of_other_engine;  // the first flag the chosen engine does not take
};

// Inputs of `kvtier hash` are cases, token lists and config.json files: a
// million 7-digit token ids is 8 MB, so 64 MiB leaves room and still stops a
// wrong path to a huge file before it fills memory.
constexpr size_t kHashInputBytesMax = size_t{64} << 20;

// `path` ("-": standard input, which the user asked for), read with the cap;
// a FIFO, device or directory is an error rather than a hang.
Result<std::string> ReadAll(const std::string& path, std::string_view what) {
  if (path == "-") return ReadStdinCapped(what, kHashInputBytesMax);
  return ReadFileCapped(path, what, kHashInputBytesMax);
}

Result<std::vector<BigInt>> ParseTokenList(const HashFlags& f) {
  std::string text;
  if (!f.tokens_file.empty()) {
    KVTIER_ASSIGN_OR_RETURN(text, ReadAll(f.tokens_file, "--tokens-file"));
  } else {
    text = "[" + f.tokens + "]";
  }
  KVTIER_ASSIGN_OR_RETURN(nlohmann::json list, ParseJsonKeepingBigInts(text, "tokens"));
  if (!list.is_array()) return InvalidArgument("tokens: expected a JSON list of integers");
  std::vector<BigInt> out;
  for (size_t i = 0; i < list.size(); ++i) {
    KVTIER_ASSIGN_OR_RETURN(BigInt t, JsonToBigInt(list[i], "tokens[" + std::to_string(i) + "]"));
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::optional<NamespaceSpec>> NamespaceFromFlags(const HashFlags& f, std::optional<std::string>* seal_key_id) {
  if (!f.namespace_config.empty()) {
    KVTIER_ASSIGN_OR_RETURN(std::string text, ReadAll(f.namespace_config, "--namespace-config file"));
    KVTIER_ASSIGN_OR_RETURN(NamespaceSpec spec, NamespaceSpecFromConfigJson(text, f.rank, seal_key_id));
    return std::optional<NamespaceSpec>(std::move(spec));
  }
  if (!f.model) return std::optional<NamespaceSpec>();
  NamespaceSpec spec;
  spec.model_name = *f.model;
  spec.tokens_per_hash = f.hash_block_size;
  spec.blocks_per_file = f.blocks_per_chunk;
  spec.tp_size = f.tp;
  spec.pp_size = f.pp;
  spec.pcp_size = f.pcp;
  spec.dcp_size = f.dcp;
  spec.rank = f.rank;
  spec.dtype = f.dtype;
  spec.parallel_agnostic = !f.not_agnostic;
  KvCacheGroupSpec group;
  group.tokens_per_block = f.hash_block_size;
  for (uint32_t i = 0; i < f.num_layers; ++i) {
    std::string name = f.layer_template;
    if (auto at = name.find("{}"); at != std::string::npos) name.replace(at, 2, std::to_string(i));
    group.layer_names.push_back(std::move(name));
  }
  spec.kv_cache_groups.push_back(std::move(group));
  return std::optional<NamespaceSpec>(std::move(spec));
}

// A namespace read from a config.json fixes the hash granularity
// (tokens_per_hash) and the chunk size (blocks_per_file): vLLM wrote the
// files under exactly those. A flag that says otherwise is an error naming
// both values; one that agrees is accepted.
Status TakeChunkingFromNamespace(const HashFlags& f, const NamespaceSpec& ns, HashQuery* q) {
  const std::string file = "--namespace-config " + f.namespace_config;
  if (ns.tokens_per_hash < 1 || ns.tokens_per_hash > UINT32_MAX) {
    return InvalidArgument(file + ": tokens_per_hash " + std::to_string(ns.tokens_per_hash) + " is out of range");
  }
  if (ns.blocks_per_file < 1 || ns.blocks_per_file > UINT32_MAX) {
    return InvalidArgument(file + ": blocks_per_file " + std::to_string(ns.blocks_per_file) + " is out of range");
  }
  if (f.hash_block_size_given && f.hash_block_size != ns.tokens_per_hash) {
    return InvalidArgument("--hash-block-size " + std::to_string(f.hash_block_size) + " contradicts tokens_per_hash " +
                           std::to_string(ns.tokens_per_hash) + " in " + file + " (drop the flag: the file decides)");
  }
  if (f.blocks_per_chunk_given && f.blocks_per_chunk != ns.blocks_per_file) {
    return InvalidArgument("--blocks-per-chunk " + std::to_string(f.blocks_per_chunk) + " contradicts blocks_per_file " +
                           std::to_string(ns.blocks_per_file) + " in " + file + " (drop the flag: the file decides)");
  }
  q->hash_block_size = static_cast<uint32_t>(ns.tokens_per_hash);
  q->blocks_per_chunk = static_cast<uint32_t>(ns.blocks_per_file);
  return Status::Ok();
}

// L184: --seal-key-file names a sealed namespace by its key's id; the key
// itself is wiped here, unused. A sealed config.json names one too: they
// must agree.
Status TakeSealKey(const std::string& path, bool group_read, HashQuery* q) {
  if (!q->ns) return InvalidArgument("--seal-key-file: give the namespace too (--model or --namespace-config)");
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SealKey> key, SealKey::FromFile(path, group_read));
  if (q->seal_key_id && *q->seal_key_id != key->key_id_hex()) {
    return InvalidArgument("--seal-key-file: key id " + key->key_id_hex() + ", but --namespace-config is sealed with " +
                           *q->seal_key_id);
  }
  q->seal_key_id = key->key_id_hex();
  return Status::Ok();
}

Result<HashQuery> QueryFromFlags(const HashFlags& f) {
  if (!f.input.empty()) {
    KVTIER_ASSIGN_OR_RETURN(std::string text, ReadAll(f.input, "--input file"));
    return HashQueryFromCase(text);
  }
  if (f.tokens.empty() && f.tokens_file.empty()) {
    return InvalidArgument("give --input CASE.json, --tokens 1,2,3 or --tokens-file FILE");
  }
  HashQuery q;
  KVTIER_ASSIGN_OR_RETURN(q.algo, ParseHashAlgo(f.algo));
  if (f.seed) {
    q.pythonhashseed = f.seed;
  } else if (const char* env = std::getenv("PYTHONHASHSEED"); env != nullptr && !f.no_seed) {
    q.pythonhashseed = std::string(env);  // as vLLM would see it
  }
  q.hash_block_size = f.hash_block_size;
  KVTIER_ASSIGN_OR_RETURN(q.token_ids, ParseTokenList(f));
  q.extras.lora_name = f.lora;
  q.extras.cache_salt = f.salt;
  KVTIER_ASSIGN_OR_RETURN(q.ns, NamespaceFromFlags(f, &q.seal_key_id));
  q.blocks_per_chunk = f.blocks_per_chunk;
  if (!f.namespace_config.empty()) KVTIER_RETURN_IF_ERROR(TakeChunkingFromNamespace(f, *q.ns, &q));
  q.group_idx = f.group;
  q.root_dir = f.root;
  q.explain = f.explain;
  if (f.seal_key_file) KVTIER_RETURN_IF_ERROR(TakeSealKey(*f.seal_key_file, f.seal_key_group_read, &q));
  return q;
}

// With --root each chunk's file is stat'ed: on a hung mount that waits in
// the kernel, so the query runs watched (io/io_watch.h), --io-timeout per stat.
Result<nlohmann::json> RunQuery(const HashFlags& f, uint64_t timeout_ms) {
  KVTIER_ASSIGN_OR_RETURN(HashQuery query, QueryFromFlags(f));
  if (!query.root_dir) return RunHashQuery(query);
  return RunWatchedFor<nlohmann::json>(timeout_ms, "", [query = std::move(query)] { return RunHashQuery(query); });
}

Result<nlohmann::json> RunSglangQuery(const HashFlags& f, uint64_t timeout_ms) {
  if (f.tokens.empty() && f.tokens_file.empty()) return InvalidArgument("give --tokens 1,2,3 or --tokens-file FILE");
  SglangHashQuery q;
  KVTIER_ASSIGN_OR_RETURN(q.token_ids, ParseTokenList(f));
  SglangNamespaceFlags sg = f.sg;
  sg.model = f.model;
  sg.dtype = f.dtype;
  sg.tp_size = f.tp, sg.pp_size = f.pp;
  if (!f.namespace_config.empty()) {
    KVTIER_ASSIGN_OR_RETURN(sg.config_text, ReadAll(f.namespace_config, "--namespace-config file"));
    sg.config_file = f.namespace_config;
  }
  KVTIER_ASSIGN_OR_RETURN(q.ns, SglangSpecFromFlags(sg));
  q.root_dir = f.root;
  q.page_size = f.page_size;
  q.prior_hash = f.prior_hash;
  q.extra_key = f.extra_key;
  q.cache_salt = f.salt;
  if (!q.root_dir) return RunSglangHashQuery(q);
  // Each page's file is stat'ed: watched, as the vLLM mode (RunQuery).
  return RunWatchedFor<nlohmann::json>(timeout_ms, "", [q = std::move(q)] { return RunSglangHashQuery(q); });
}

Result<nlohmann::json> RunEngineQuery(const HashFlags& f) {
  if (f.engine != "vllm" && f.engine != "sglang") {
    return InvalidArgument("--engine: expected vllm or sglang, got '" + f.engine + "'");
  }
  if (!f.given_flag_of_other_engine.empty()) {
    return InvalidArgument(f.given_flag_of_other_engine + " does not apply to --engine " + f.engine);
  }
  // Checked with or without --root: a bad value is an error, never ignored.
  const Result<uint64_t> timeout_ms = ParseDurationMs(f.io_timeout);
  if (!timeout_ms.ok()) return timeout_ms.status().WithContext("--io-timeout");
  return f.engine == "sglang" ? RunSglangQuery(f, *timeout_ms) : RunQuery(f, *timeout_ms);
}

int RunHash(const HashFlags& f) {
  Result<nlohmann::json> report = RunEngineQuery(f);
  if (!report.ok()) {
    PrintError("hash", report.status().ToString());
    if (report.status().code() == StatusCode::kTimedOut) ExitHung();
    return report.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  // --model, --root and the seed may hold any bytes: the text forms quote
  // them, the JSON forms stay valid UTF-8 (cli/cli_text.h).
  if (!f.input.empty()) {
    std::cout << JsonOutput(CaseOutput(*report));
  } else if (f.json) {
    std::cout << JsonOutput(std::move(*report));
  } else {
    std::cout << (f.engine == "sglang" ? FormatSglangHashReport(*report) : FormatHashReport(*report));
  }
  return 0;
}

// The flags that define an SGLang namespace besides --model, --dtype, --tp and --pp.
const std::vector<const char*> kSglangGeometryFlags = {"--mem-layout", "--k-bytes-per-token", "--v-bytes-per-token",
                                                       "--layer-num", "--mla", "--cp", "--model-path",
                                                       "--model-revision"};

std::string FirstGiven(CLI::App* cmd, const std::vector<const char*>& names) {
  for (const char* name : names) {
    if (cmd->get_option(name)->count() > 0) return name;
  }
  return "";
}

void AddSglangNamespaceFlags(CLI::App* cmd, SglangNamespaceFlags* sg) {
  cmd->add_option("--mem-layout", sg->mem_layout,
                  "SGLang: host KV layout (layer_first | page_first | page_first_direct | page_head)");
  cmd->add_option("--k-bytes-per-token", sg->k_bytes_per_token, "SGLang: K bytes per token per layer on this rank");
  cmd->add_option("--v-bytes-per-token", sg->v_bytes_per_token, "SGLang: V bytes per token per layer (MLA: 0)");
  cmd->add_option("--layer-num", sg->layer_num, "SGLang: layers held by this rank");
  cmd->add_flag("--mla", sg->mla, "SGLang: an MLA model (pages of TP rank 0, read by every TP rank)");
  cmd->add_option("--tp-rank", sg->tp_rank, "SGLang: TP rank (with --tp; places the _r<rank> directory)");
  cmd->add_option("--pp-rank", sg->pp_rank, "SGLang: PP rank (with --pp)");
  cmd->add_option("--cp", sg->cp_size, "SGLang: attention context-parallel size");
  cmd->add_option("--cp-rank", sg->cp_rank, "SGLang: attention context-parallel rank");
  cmd->add_option("--model-path", sg->model_path, "SGLang: the model_path extra_config key, when the server has it");
  cmd->add_option("--model-revision", sg->model_revision, "SGLang: the model_revision extra_config key");
}

void AddSglangFlags(CLI::App* cmd, HashFlags* flags) {
  cmd->add_option("--engine", flags->engine,
                  "vllm | sglang. sglang: one page key per line (chained SHA-256 over 4-byte little-endian token "
                  "ids; a trailing partial page too), with its file's path given a namespace (--model and the "
                  "SGLang geometry flags, or --namespace-config) and whether it exists with --root")
      ->capture_default_str();
  cmd->add_option("--page-size", flags->page_size,
                  "SGLang: tokens per page (--page-size of the server; with --namespace-config the file's)");
  cmd->add_option("--prior-hash", flags->prior_hash,
                  "SGLang: hex key the chain continues from (e.g. a seed or the last key SGLang printed): exact "
                  "whatever the seed encoding");
  cmd->add_option("--extra-key", flags->extra_key,
                  "SGLang: the request's extra_key (e.g. LoRA id). With it or --cache-salt the chain is seeded "
                  "as sglang#38577 describes: SHA-256(\"sglang-storage-namespace-v1\\0\" || part(extra_key) || "
                  "part(cache_salt)), part = 0x00 if absent else 0x01 || u32le(len) || utf8. This encoding is "
                  "kvtier's reading of the PR's description, NOT verified against SGLang's code; give "
                  "--prior-hash with a seed SGLang prints for an exact chain");
  AddSglangNamespaceFlags(cmd, &flags->sg);
}

// The first flag given that --engine `engine` does not take ("" if none):
// each engine's flags mean nothing to the other, and silently ignoring one
// would print keys the user did not ask for.
std::string FlagOfOtherEngine(CLI::App* cmd, const std::string& engine) {
  static const char* const kSglangOnly[] = {
      "--page-size", "--prior-hash", "--extra-key", "--mem-layout", "--k-bytes-per-token", "--v-bytes-per-token",
      "--layer-num", "--mla", "--tp-rank", "--pp-rank", "--cp", "--cp-rank", "--model-path", "--model-revision"};
  static const char* const kVllmOnly[] = {
      "--input", "--algo", "--seed", "--no-seed", "--hash-block-size", "--num-layers", "--layer-name-template",
      "--blocks-per-chunk", "--group", "--pcp", "--dcp", "--rank", "--not-parallel-agnostic", "--lora-name",
      "--explain", "--seal-key-file", "--seal-key-group-read"};
  return engine == "sglang" ? FirstGiven(cmd, {std::begin(kVllmOnly), std::end(kVllmOnly)})
                            : FirstGiven(cmd, {std::begin(kSglangOnly), std::end(kSglangOnly)});
}

}  // namespace

void RegisterHashCommand(CLI::App* app, CliContext* ctx) {
  auto flags = std::make_shared<HashFlags>();
  CLI::App* cmd = app->add_subcommand("hash", "Block hashes, offload keys and file paths of a prompt, byte-exact "
                                              "with vLLM; with --engine sglang, SGLang's HiCache page keys");
  cmd->add_option("--input", flags->input,
                  "A compat case (kvtier-compat-cases/1 JSON, '-' for stdin); prints its 'expected' members");
  cmd->add_option("--algo", flags->algo, "sha256 | sha256_cbor | xxhash | xxhash_cbor")->capture_default_str();
  cmd->add_option("--seed", flags->seed, "PYTHONHASHSEED as vLLM sees it (default: $PYTHONHASHSEED)");
  cmd->add_flag("--no-seed", flags->no_seed, "Act as if PYTHONHASHSEED were unset");
  cmd->add_option("--tokens", flags->tokens, "Comma-separated token ids");
  cmd->add_option("--tokens-file", flags->tokens_file, "A JSON list of token ids ('-' for stdin)");
  cmd->add_option("--hash-block-size", flags->hash_block_size,
                  "Tokens per hash (vLLM tokens_per_hash; with --namespace-config the file's, and a different "
                  "value is an error)")
      ->capture_default_str();
  cmd->add_option("--model", flags->model,
                  "Model name as the engine was given it (enables paths; SGLang: the served model name, with "
                  "--mem-layout, --k-bytes-per-token, --v-bytes-per-token, --layer-num)");
  cmd->add_option("--dtype", flags->dtype, "KV cache dtype")->capture_default_str();
  cmd->add_option("--num-layers", flags->num_layers, "Attention layers in the single KV group")->capture_default_str();
  cmd->add_option("--layer-name-template", flags->layer_template, "Layer name; {} is the index")->capture_default_str();
  cmd->add_option("--blocks-per-chunk", flags->blocks_per_chunk,
                  "GPU blocks per offloaded chunk (with --namespace-config the file's blocks_per_file, and a "
                  "different value is an error)")
      ->capture_default_str();
  cmd->add_option("--group", flags->group, "KV-cache group index")->capture_default_str();
  cmd->add_option("--tp", flags->tp, "Tensor-parallel size (vLLM: with --not-parallel-agnostic)");
  cmd->add_option("--pp", flags->pp, "Pipeline-parallel size");
  cmd->add_option("--pcp", flags->pcp, "Prefill context-parallel size");
  cmd->add_option("--dcp", flags->dcp, "Decode context-parallel size");
  cmd->add_option("--rank", flags->rank, "Rank for the _r<rank> directory");
  cmd->add_flag("--not-parallel-agnostic", flags->not_agnostic, "The namespace records tp/pp/pcp/dcp and rank");
  cmd->add_option("--namespace-config", flags->namespace_config,
                  "Take the namespace from an existing config.json, with its tokens_per_hash, blocks_per_file "
                  "and groups' tokens_per_block (one path per chunk); SGLang: its page_size and geometry "
                  "(the ranks from --tp-rank, --pp-rank, --cp-rank)");
  cmd->add_option("--root", flags->root, "root_dir: print absolute paths and whether each file exists");
  cmd->add_option("--seal-key-file", flags->seal_key_file, "A seal key: its sealed namespace's paths (docs/sealed.md)");
  AddSealKeyGroupReadFlag(cmd, &flags->seal_key_group_read);
  cmd->add_option("--lora-name", flags->lora, "LoRA adapter name");
  cmd->add_option("--cache-salt", flags->salt, "Request cache_salt (vLLM: an extra key; SGLang: seeds the chain, see --extra-key)");
  cmd->add_flag("--json", flags->json, "Machine-readable output");
  cmd->add_flag("--explain", flags->explain, "Include each block's serialized input (with --json)");
  cmd->add_option("--io-timeout", flags->io_timeout,
                  "With --root: give up (exit 8, naming the path) when one stat takes longer than this: a hung "
                  "mount (seconds, e.g. 0.5 or 30, or with a unit: 500ms, 10s; 0: wait forever)")
      ->capture_default_str();
  cmd->get_option("--tokens")->excludes(cmd->get_option("--tokens-file"));
  cmd->get_option("--input")->excludes(cmd->get_option("--tokens"))->excludes(cmd->get_option("--tokens-file"));
  // The file defines the namespace: flags that would define another one are refused.
  for (const char* name : {"--model", "--dtype", "--num-layers", "--layer-name-template", "--tp", "--pp", "--pcp",
                           "--dcp", "--not-parallel-agnostic"}) {
    cmd->get_option(name)->excludes(cmd->get_option("--namespace-config"));
  }
  AddSglangFlags(cmd, flags.get());
  cmd->callback([flags, ctx, cmd] {
    flags->given_flag_of_other_engine = FlagOfOtherEngine(cmd, flags->engine);
    flags->sg.first_geometry_flag = FirstGiven(cmd, kSglangGeometryFlags);
    flags->hash_block_size_given = cmd->get_option("--hash-block-size")->count() > 0;
    flags->blocks_per_chunk_given = cmd->get_option("--blocks-per-chunk")->count() > 0;
    // With --root in a child process (RunGuarded): a stat stuck on a hung mount never holds the shell.
    ctx->exit_code = flags->root ? RunGuarded([&] { return RunHash(*flags); }) : RunHash(*flags);
  });
}

}  // namespace kvtier::internal
