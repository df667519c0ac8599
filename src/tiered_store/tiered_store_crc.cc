// Checksums at the copies (fs/staged_crc.h): with checksums on, a store's
// rows get their CRC32C from their copy off the GPU (the fs tiers write it,
// WriteThrough), and a row promoted from an fs tier unchecked is checked by
// its copy to the GPU against the CRC its block carries (once: a row that
// passed is copied unchecked after). A row that fails and hashes wrong on the
// CPU too is the miss a corrupt block is on the CPU (FORMAT.md L67): never
// reported ok to the engine (which recomputes it), its CPU row dropped, its
// file removed if the path still names the file read (L69), counted as a
// corrupt load. One that hashes right on the CPU went wrong on the way: an
// error, row and file kept. Either way the load's prefix ends there.
#include <cerrno>

#include "tiered_store/tiered_store_impl.h"
#include "util/crc32c.h"

namespace kvtier::internal {

// With mu_ held. A promoted row's check: armed when it came unchecked from a
// block that carries a CRC; a block without one is accepted on size (L68).
void TieredStoreImpl::NoteRowCheck(size_t tier, const FsJobRecord& record, size_t k) {
  const bool armed = k < record.loaded.size() && record.loaded[k].has_crc;
  row_checks_[record.rows[k]] = armed ? RowCheck{true, false, tier, record.loaded[k]} : RowCheck{};
}

// With mu_ held. A load's copies: rows with an armed check are checked by
// their copy, the others copied as they are; one ticket each. `rows` and
// record.keys line up; chunk i's GPU blocks are gpu_blocks[i*bpc, (i+1)*bpc).
// Every chunk is pending before either ticket is submitted: a part that
// fails at once must not finish the job while the other part still copies.
void TieredStoreImpl::SubmitLoadCopies(CopyRecord record, std::vector<uint32_t> rows,
                                       std::span<const uint32_t> gpu_blocks) {
  const size_t bpc = config_.blocks_per_chunk;
  CopyRecord parts[2];  // [0]: plain, [1]: checked
  std::vector<uint32_t> blocks[2];
  for (size_t k = 0; k < record.keys.size(); ++k) {
    const RowCheck& check = row_checks_[rows[k]];
    const int p = check.armed ? 1 : 0;
    parts[p].keys.push_back(record.keys[k]);
    parts[p].index.push_back(record.index[k]);
    parts[p].rows.push_back(rows[k]);
    const auto first = gpu_blocks.begin() + static_cast<ptrdiff_t>(record.index[k] * bpc);
    blocks[p].insert(blocks[p].end(), first, first + static_cast<ptrdiff_t>(bpc));
    if (check.armed) parts[p].expected.push_back(check.read.crc);
  }
  for (size_t i : record.index) jobs_.Expect(record.job_id, i);
  for (int p = 0; p < 2; ++p) {
    if (parts[p].keys.empty()) continue;
    parts[p].direction = record.direction;
    parts[p].job_id = record.job_id;
    parts[p].request_id = record.request_id;
    parts[p].first_chunk = record.first_chunk;
    CopyChecksums checksums;
    checksums.expected = parts[p].expected;
    SubmitCopy(std::move(parts[p]), std::move(blocks[p]), checksums);
  }
}

// With mu_ held. A finished CPU->GPU copy: each chunk is ok, or, for a
// checked row that failed its check, not served (CheckFailed). A chunk not
// served ends the load's prefix (JobTable::EndPrefix).
void TieredStoreImpl::OnLoadCopied(CopyRecord& record, const Status& status, const FinishedCopy* done) {
  cpu_->Release(record.keys);
  std::vector<FsJobRecord> removals(router_.size());
  for (size_t k = 0; k < record.keys.size(); ++k) {
    ChunkResult result{status.ok() ? ChunkOutcome::kOk : ChunkOutcome::kError, status};
    const bool checked = status.ok() && record.checksums;
    if (checked && (done == nullptr || k >= done->row_status.size())) {
      // Never served unchecked; but nothing says the block is bad: it stays.
      result = ChunkResult{ChunkOutcome::kError, Status(StatusCode::kInternal, "the checked copy to the GPU gave no verdict")};
    } else if (checked && !done->row_status[k].ok()) {
      result = CheckFailed(record, k, &removals);
    } else if (status.ok()) {
      if (checked) row_checks_[record.rows[k]] = RowCheck{};  // passed: later copies need not check it again
      ++cpu_stats_.rows_out;
      cpu_stats_.bytes_out += row_bytes_;
    }
    if (result.outcome != ChunkOutcome::kOk) jobs_.EndPrefix(record.job_id, record.index[k]);
    jobs_.Complete(record.job_id, record.index[k], std::move(result));
  }
  for (size_t t = 0; t < removals.size(); ++t) {
    if (removals[t].keys.empty()) continue;
    removals[t].kind = FsJobRecord::Kind::kRemove;
    // Not started (the tier's root is down, or it is closing): the file stays for gc.
    router_.Submit(t, removals[t]).IgnoreError();
  }
}

// With mu_ held. Row k of a checked copy failed its check. The CPU row is
// hashed again on the CPU (a rare path): if it still mismatches, the block
// is corrupt (DropCorruptRow); if it matches, the bytes went wrong on the
// way (a transient PCIe or GPU fault, or the engine writing the destination
// blocks during the copy): the chunk is not served, row and file stay.
ChunkResult TieredStoreImpl::CheckFailed(const CopyRecord& record, size_t k, std::vector<FsJobRecord>* removals) {
  const uint32_t row = record.rows[k];
  if (k < record.expected.size() && Crc32c({RowPtr(row), row_bytes_}) == record.expected[k]) {
    ++cpu_stats_.crc_staged_copy_faults;
    return ChunkResult{ChunkOutcome::kError,
                       ErrnoToStatus(EIO, "CPU row " + std::to_string(row) +
                                              ": CRC32C mismatch after the copy to the GPU, but the CPU row is good "
                                              "(the copy went wrong; row and block kept)")};
  }
  return DropCorruptRow(record, k, removals);
}

// With mu_ held. Row k of `record` failed its check: dropped from the CPU
// tier (a held row at its last release, CpuTier::Discard; until then each
// copy fails its check again), its fs verdicts forgotten, its block's
// removal added to `removals` (once per row). A row dropped later keeps its
// stale check until reused: a store or promotion into it sets a new one.
ChunkResult TieredStoreImpl::DropCorruptRow(const CopyRecord& record, size_t k, std::vector<FsJobRecord>* removals) {
  ++cpu_stats_.crc_staged_mismatches;
  const OffloadKey& key = record.keys[k];
  RowCheck& check = row_checks_[record.rows[k]];
  const bool from_tier = check.armed && check.tier < router_.size();
  const std::string where = from_tier ? router_.tier(check.tier).BlockPath(key) : "CPU row " + std::to_string(record.rows[k]);
  if (from_tier && !check.removal_sent) {
    (*removals)[check.tier].keys.push_back(key);
    (*removals)[check.tier].loaded.push_back(check.read);
    check.removal_sent = true;
  }
  if (cpu_->Discard(key)) check = RowCheck{};
  requests_.ForgetHits(key);
  return ChunkResult{ChunkOutcome::kMiss, ErrnoToStatus(EBADMSG, where + ": CRC32C mismatch after the copy to the GPU")};
}

}  // namespace kvtier::internal
