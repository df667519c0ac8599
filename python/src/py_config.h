// One fs tier's config from Python (FsTier, VllmTier, kvtier.vllm): a dict
// of tier keys or JSON text, parsed by kvtier's own ParseFsTierConfig so
// every rule and message is the C++ parser's.
#pragma once

#include "kvtier/fs_tier.h"
#include "kvtier/fs_tier_options.h"
#include "py_common.h"

namespace kvtier::py {

// The dict's values become JSON as Python's own JSON types would, with these
// conversions (and nothing else coerced): os.PathLike -> its path; numpy
// integers and floats -> int and float; numpy.bool_ -> bool; a tuple -> a
// list. `root_dir` (str, bytes or os.PathLike) reaches the parser as the raw
// bytes os.fsencode gives, so a path that is not UTF-8 works as in vLLM.
// kvtier.KvtierError(invalid_argument) naming the key for NaN or infinity,
// a non-str dict key, a string that is not Unicode text, nesting deeper than
// kOffloadConfigDepthMax, and any other type; for JSON text that is not UTF-8;
// and for every rule the parser enforces.
FsTierOptions ParseTierConfig(const pb::object& config);
// The open options of a tier of `ns` over rows of row_bytes (FsTier,
// VllmTier), its tier config parsed by ParseTierConfig.
FsTierOpenOptions TierOpenOptions(const Namespace& ns, uint64_t row_bytes, const pb::object& config);

}  // namespace kvtier::py
