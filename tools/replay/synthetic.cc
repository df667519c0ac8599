// Seeded synthetic traces (docs/trace-format.md): "agents" (long shared
// prefixes growing turn by turn, where offloading pays) and "chat" (short
// independent conversations, where it should not hurt).
//
// Both generators first plan sessions as lengths only: a shared prefix of
// named segments, then turns (a user message and an output each). They then
// order every turn by arrival, truncate, check the token limits and only then
// expand tokens, so an option set that would be huge fails before allocating.
// Prompts are made of named segments (SegmentTokens), so a session's earlier
// turns reappear in its later prompts as the same tokens.
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "replay/trace.h"

namespace kvtier::internal {
namespace {

// splitmix64. Hand-rolled because the <random> distributions differ between
// standard libraries, and a seed should name the same trace everywhere.
class Rng {
 public:
  // A stream for one named part of a trace (a tenant, a session), so adding
  // sessions never changes the ones before them.
  Rng(uint64_t seed, std::string_view part) : state_(XXH64(part.data(), part.size(), seed)) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi] (the modulo bias is far below what matters here).
  uint64_t Uniform(uint64_t lo, uint64_t hi) { return lo + Next() % (hi - lo + 1); }
  double Exponential(double mean) {
    const double unit = static_cast<double>(Next() >> 11) * 0x1.0p-53;  // [0, 1)
    return -mean * std::log1p(-unit);
  }

 private:
  uint64_t state_;
};

// Simulated decode speed: a session's next turn cannot start before the
// previous output was generated.
constexpr double kDecodeSecondsPerToken = 0.01;
// More requests than this are refused rather than planned.
constexpr uint32_t kRequestsMax = 1u << 20;
// Larger scales break the per-request token limit anyway; this bound keeps
// the length arithmetic far from overflow.
constexpr double kScaleMax = 1024;

struct Segment {
  std::string ref;
  uint64_t len = 0;
};

struct Turn {
  uint64_t user = 0, out = 0;  // token counts of the turn's user message and output
  uint64_t prompt = 0;         // the turn's prompt length
  double arrival_s = 0;
};

struct SessionPlan {
  std::string session, tenant;
  std::vector<Segment> prefix;  // before the first turn (system prompt, tools)
  std::vector<Turn> turns;
};

// The ranges a session's turns are drawn from (unscaled token counts).
struct TurnShape {
  uint64_t user_lo, user_hi, out_lo, out_hi;
  uint64_t max_turns;
  double think_mean_s;  // mean pause between an output and the next message
};

uint64_t Scaled(uint64_t n, double scale) {
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(static_cast<double>(n) * scale)));
}

// Adds turns until the prompt reaches `target` tokens or max_turns: the last
// turn's user message is cut (or stretched) so its prompt is `target`.
void PlanTurns(const TurnShape& shape, double scale, uint64_t target, double start_s, Rng* rng,
               SessionPlan* plan) {
  uint64_t len = 0;
  for (const Segment& s : plan->prefix) len += s.len;
  double arrival = start_s;
  for (uint64_t k = 0; k < shape.max_turns; ++k) {
    uint64_t user = Scaled(rng->Uniform(shape.user_lo, shape.user_hi), scale);
    const uint64_t out = Scaled(rng->Uniform(shape.out_lo, shape.out_hi), scale);
    const bool last = k + 1 == shape.max_turns || len + user + out >= target;
    if (last) user = target > len ? target - len : 1;
    plan->turns.push_back({user, out, len + user, arrival});
    if (last) break;
    len += user + out;
    arrival += kDecodeSecondsPerToken * static_cast<double>(out) + rng->Exponential(shape.think_mean_s);
  }
}

// ---- agents -----------------------------------------------------------------

constexpr int kAgentTenants = 4;
constexpr int kAgentsPerTenant = 4;
constexpr double kAgentStartGapMeanS = 2.0;
constexpr TurnShape kAgentTurns = {256, 4096, 64, 1024, 1000, 3.0};

struct AgentTenant {
  std::vector<Segment> prefix;  // system prompt, tool schema
  uint64_t base = 0;            // their unscaled length
};

std::vector<AgentTenant> PlanAgentTenants(const SyntheticOptions& o, const std::string& ns) {
  std::vector<AgentTenant> tenants;
  for (int t = 0; t < kAgentTenants; ++t) {
    const std::string tenant = ns + "/tenant" + std::to_string(t);
    Rng rng(o.seed, "agents/" + tenant);
    const uint64_t system = rng.Uniform(2048, 4096), tools = rng.Uniform(2048, 8192);
    tenants.push_back({{{tenant + "/system", Scaled(system, o.scale)},
                        {tenant + "/tools", Scaled(tools, o.scale)}},
                       system + tools});
  }
  return tenants;
}

// Session `index` belongs to tenant index % 4, so consecutive sessions
// alternate tenants and the tenants' traffic interleaves.
SessionPlan PlanAgentSession(const SyntheticOptions& o, const std::string& ns,
                             const std::vector<AgentTenant>& tenants, size_t index,
                             double start_s) {
  const AgentTenant& tenant = tenants[index % kAgentTenants];
  SessionPlan plan;
  plan.tenant = "tenant" + std::to_string(index % kAgentTenants);
  plan.session = ns + "/" + plan.tenant + "/agent" + std::to_string(index / kAgentTenants);
  plan.prefix = tenant.prefix;
  Rng rng(o.seed, "agents/" + plan.session);
  // At least 8K, and room for a first turn after the system prompt and tools.
  const uint64_t lo = std::max<uint64_t>(8192, tenant.base + 2048);
  PlanTurns(kAgentTurns, o.scale, Scaled(rng.Uniform(lo, 65536), o.scale), start_s, &rng, &plan);
  return plan;
}

// ---- chat -------------------------------------------------------------------

constexpr int kChatConversations = 64;
constexpr double kChatStartGapMeanS = 0.5;
constexpr TurnShape kChatTurns = {32, 512, 32, 512, 4, 5.0};

SessionPlan PlanChatSession(const SyntheticOptions& o, const std::string& ns, size_t index,
                            double start_s) {
  SessionPlan plan;
  plan.tenant = "chat";
  plan.session = ns + "/conv" + std::to_string(index);
  plan.prefix = {{ns + "/system", Scaled(100, o.scale)}};
  Rng rng(o.seed, "chat/" + plan.session);
  const uint64_t target = Scaled(rng.Uniform(200, 2048), o.scale);
  TurnShape shape = kChatTurns;
  shape.max_turns = rng.Uniform(1, 4);
  PlanTurns(shape, o.scale, target, start_s, &rng, &plan);
  return plan;
}

// ---- shared: plan, order, check, expand ------------------------------------

struct Slot {
  size_t session = 0, turn = 0;
};

// The default sessions, plus more while `requests` asks for more turns than
// they have. Sessions start at exponential gaps.
template <class MakeSession>
std::vector<SessionPlan> PlanSessions(const SyntheticOptions& o, size_t default_sessions,
                                      double start_gap_mean_s, MakeSession make) {
  std::vector<SessionPlan> sessions;
  Rng starts(o.seed, o.name + "/starts");
  double start = 0;
  size_t turns = 0;
  while (sessions.size() < default_sessions || turns < o.requests) {
    start += starts.Exponential(start_gap_mean_s);
    sessions.push_back(make(sessions.size(), start));
    turns += sessions.back().turns.size();
  }
  return sessions;
}

// Every turn in arrival order (ties: planning order), cut to `requests`.
std::vector<Slot> OrderTurns(const std::vector<SessionPlan>& sessions, uint32_t requests) {
  std::vector<Slot> slots;
  for (size_t s = 0; s < sessions.size(); ++s) {
    for (size_t k = 0; k < sessions[s].turns.size(); ++k) slots.push_back({s, k});
  }
  std::stable_sort(slots.begin(), slots.end(), [&](const Slot& a, const Slot& b) {
    return sessions[a.session].turns[a.turn].arrival_s < sessions[b.session].turns[b.turn].arrival_s;
  });
  if (requests > 0 && slots.size() > requests) slots.resize(requests);
  return slots;
}

Status CheckLimits(const SyntheticOptions& o, const std::vector<SessionPlan>& sessions,
                   const std::vector<Slot>& slots) {
  uint64_t total = 0;
  for (const Slot& slot : slots) {
    const uint64_t prompt = sessions[slot.session].turns[slot.turn].prompt;
    const uint64_t out = sessions[slot.session].turns[slot.turn].out;
    if (prompt > kTraceRequestTokensMax || out > kTraceRequestTokensMax) {
      return InvalidArgument("synthetic " + o.name + ": scale " + std::to_string(o.scale) +
                             " makes a request of " + std::to_string(std::max(prompt, out)) +
                             " tokens, more than the " + std::to_string(kTraceRequestTokensMax) +
                             " allowed per request");
    }
    total += prompt;
  }
  if (total > kTraceTokensMax) {
    return InvalidArgument("synthetic " + o.name + ": " + std::to_string(total) +
                           " prompt tokens in all, more than the " + std::to_string(kTraceTokensMax) +
                           " allowed; lower the scale or set requests");
  }
  return Status::Ok();
}

void AppendSegment(const std::string& ref, uint64_t len, std::vector<int64_t>* out) {
  const std::vector<int64_t> tokens = SegmentTokens(ref, static_cast<uint32_t>(len));
  out->insert(out->end(), tokens.begin(), tokens.end());
}

// The session's transcript: prefix, then user message and output of each
// turn. Turn k's prompt is its first `prompt` tokens.
std::vector<int64_t> Transcript(const SessionPlan& plan, uint64_t length) {
  std::vector<int64_t> tokens;
  tokens.reserve(length);
  for (const Segment& s : plan.prefix) AppendSegment(s.ref, s.len, &tokens);
  for (size_t k = 0; k < plan.turns.size() && tokens.size() < length; ++k) {
    const std::string turn = plan.session + "/turn" + std::to_string(k + 1);
    AppendSegment(turn + "/user", plan.turns[k].user, &tokens);
    AppendSegment(turn + "/out", plan.turns[k].out, &tokens);
  }
  tokens.resize(std::min<uint64_t>(tokens.size(), length));
  return tokens;
}

Trace Expand(const std::string& name, const std::vector<SessionPlan>& sessions,
             const std::vector<Slot>& slots) {
  Trace trace;
  trace.name = "synthetic:" + name;
  trace.requests.resize(slots.size());
  std::vector<std::vector<size_t>> by_session(sessions.size());
  for (size_t i = 0; i < slots.size(); ++i) by_session[slots[i].session].push_back(i);
  for (size_t s = 0; s < sessions.size(); ++s) {
    if (by_session[s].empty()) continue;
    uint64_t longest = 0;
    for (const size_t i : by_session[s]) longest = std::max(longest, sessions[s].turns[slots[i].turn].prompt);
    const std::vector<int64_t> transcript = Transcript(sessions[s], longest);
    for (const size_t i : by_session[s]) {
      const Turn& turn = sessions[s].turns[slots[i].turn];
      TraceRequest& r = trace.requests[i];
      r.arrival_s = turn.arrival_s;
      r.session = sessions[s].session;
      r.tenant = sessions[s].tenant;
      r.tokens.assign(transcript.begin(), transcript.begin() + static_cast<ptrdiff_t>(turn.prompt));
      r.output_tokens = static_cast<uint32_t>(turn.out);
    }
  }
  return trace;
}

}  // namespace

Result<Trace> GenerateSynthetic(const SyntheticOptions& options) {
  if (!(options.scale > 0) || options.scale > kScaleMax) {
    return InvalidArgument("synthetic trace: scale must be in (0, " + std::to_string(kScaleMax) +
                           "], got " + std::to_string(options.scale));
  }
  if (options.requests > kRequestsMax) {
    return InvalidArgument("synthetic trace: requests must be at most " +
                           std::to_string(kRequestsMax) + ", got " + std::to_string(options.requests));
  }
  // Segment names carry the seed, so traces of different seeds share no
  // prefix (a replay of seed 2 gets no hits from a cache filled by seed 1).
  const std::string ns = options.name + "-" + std::to_string(options.seed);
  std::vector<SessionPlan> sessions;
  if (options.name == "agents") {
    const auto tenants = PlanAgentTenants(options, ns);
    sessions = PlanSessions(options, kAgentTenants * kAgentsPerTenant, kAgentStartGapMeanS,
                            [&](size_t i, double start) {
                              return PlanAgentSession(options, ns, tenants, i, start);
                            });
  } else if (options.name == "chat") {
    sessions = PlanSessions(options, kChatConversations, kChatStartGapMeanS,
                            [&](size_t i, double start) {
                              return PlanChatSession(options, ns, i, start);
                            });
  } else {
    return InvalidArgument("synthetic trace: unknown name '" + options.name +
                           "' (expected 'agents' or 'chat')");
  }
  const std::vector<Slot> slots = OrderTurns(sessions, options.requests);
  KVTIER_RETURN_IF_ERROR(CheckLimits(options, sessions, slots));
  return Expand(options.name, sessions, slots);
}

}  // namespace kvtier::internal
