// Schedule generators: pure functions (stages p, micro-batches m[, chunks v]) -> compute-only
// schedule (F/B/I/W actions only). Run InsertCommunication() (communication.h) on the result to get
// what a runtime executes. Each generator is the single source of truth for its schedule; the
// constructions are described in docs/schedules.md. All throw baton::Error when p, m or v
// is below 1.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "scheduler/schedule.h"
#include "scheduler/schedule_kinds.h"

namespace baton {

// GPipe: every stage runs all m forwards, then all m backwards (micro-batch order).
Schedule GPipe(int stages, int microbatches);

// 1F1B (PipeDream-flush, Megatron's non-interleaved schedule): stage s runs min(p-s-1, m) warmup
// forwards, then alternates one forward and one backward, then drains the remaining backwards.
Schedule OneFOneB(int stages, int microbatches);

// Megatron's interleaved 1F1B with v chunks per stage (virtual stage c*p + r on stage r). Works for
// any m: Megatron needs m % p == 0, so this schedules m rounded up to a multiple of p and drops the
// padding micro-batches, which keeps it deadlock-free (see docs/schedules.md).
Schedule Interleaved1F1B(int stages, int microbatches, int chunks);

// Interleaved zero bubble (torch.distributed.pipelining's ScheduleInterleavedZeroBubble, the
// ZB-H1 rule of Qi et al. 2023 on Megatron's loop layout): v >= 2 chunks, backward split into I
// and W. Work goes in rounds of q micro-batches, q = m / max(1, floor(m / p)) (p when p divides
// m, m when m < p): a round runs through chunk 0, then chunk 1, ...; backwards visit the chunks
// in reverse. Stage s runs (v-1)q + p-1-s warm-up forwards (interleaved 1F1B's, with one hop of
// delay per stage instead of two: an I comes back sooner than a B), then F and I alternately,
// each I followed by the W of the I s places behind once s are held back, then the remaining
// I's and W's. Where torch requires max(1, floor(m/p)) to divide m, m is rounded up to a
// multiple of it and the padding deleted. With v = 1 and m >= p-1 it is ZB-H1 (MakeSchedule asks
// for v >= 2, as ChunksFor says).
Schedule InterleavedZeroBubble(int stages, int microbatches, int chunks);

// Zero-bubble H1 (Qi et al. 2023): backward split into I (input gradient) and W (weight gradient);
// 1F1B order on F and I, with stage s deferring up to s W's to fill the bubbles. Every stage's peak
// in-flight count is at most min(p, m), 1F1B's peak (that of stage 0).
Schedule ZeroBubbleH1(int stages, int microbatches);

// Zero-bubble H2 (Qi et al. 2023): as ZB-H1 with a memory limit of 2p-1 micro-batches instead of
// p, which lets every stage run extra warm-up forwards and keep enough W's back to fill the
// cool-down. Built by a unit-cost list scheduler (priority I > F within the limit > W; see
// docs/schedules.md). With F = I = W = 1 and m >= 2p-1 every stage s is busy without a gap from s
// to s + 3m (zero bubble between the p-1 start-up and cool-down steps; with the optimizer-step
// synchronisation bypassed as in the paper, consecutive iterations overlap into a zero bubble);
// makespan max(3m + p-1, 2m + 2p-1). Peak at most min(2p-1, m) micro-batches on every stage.
Schedule ZeroBubbleH2(int stages, int microbatches);

// Looped BFS (torch.distributed.pipelining's ScheduleLoopedBFS): loop layout, v >= 2 chunks; every
// stage runs the forwards of all micro-batches through chunk 0, then chunk 1, ..., then the
// backwards last chunk first. GPipe's memory (m*v chunk-micro-batches), interleaving's bubble:
// makespan 3(vm + p-1) + 3(v-1)max(0, p-m) with F = 1, B = 2 per chunk action. Throws
// baton::Error when chunks < 2.
Schedule LoopedBFS(int stages, int microbatches, int chunks);

// ZB-V (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): V layout, 2 chunks per stage (stage s
// holds virtual stages s and 2p-1-s), backward split into I and W. Warm-up of 2(p-s)-1 chunk-0
// forwards, then F I W per chunk; every stage holds at most 2p chunk-micro-batches (p whole-stage
// micro-batches, 1F1B's peak). With F = I = W per chunk and m >= 2p-1 the makespan is 6m + p-1
// chunk-action costs, bubble (p-1)/(6m+p-1); for smaller m it schedules 2p-1 and drops the padding.
Schedule ZeroBubbleV(int stages, int microbatches);

// DualPipeV (DeepSeek's DualPipe folded into a V, as torch.distributed.pipelining's DualPipeV): V
// layout, 2 chunks, in DeepSeek's eight steps: forwards, then a steady state pairing the F of one
// chunk with the full B of the other (DeepSeek overlaps the pair; Baton runs it in turn), then
// backwards whose second half is split, their W's filling the cool-down. Peak 2p+1
// chunk-micro-batches (DualPipe's PP+1 with PP = 2p); with F = 1, B = 2, I = W = 1 per chunk and
// m >= 2p the makespan is 6m + p-1. Needs m >= 2p: fewer are scheduled as 2p with the padding
// deleted.
Schedule DualPipeV(int stages, int microbatches);

// V-Half and V-Min (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"): V layout, 2
// chunks, split backward, built by repeating one micro-batch's building block every 6 unit costs
// (each stage's six actions at distinct offsets modulo 6, so the steady state has no bubble).
// V-Min packs the block tightest: peak 2*floor((p+4)/3) chunk-micro-batches, about a third of
// 1F1B's p stage-micro-batches, bubble about 2/3 of 1F1B's. V-Half delays the way back up by one
// unit per stage: peak at most 2*floor((p+2)/2), about half, bubble about 1/2 to 3/5 of 1F1B's.
// Figures in docs/schedules.md.
Schedule VHalf(int stages, int microbatches);
Schedule VMin(int stages, int microbatches);

// Evaluation: forwards only, no backward. Stage r runs F of every micro-batch of its chunk 0, then
// of chunk 1, ... (virtual stage c*p + r); the head's forward computes the loss. Validate()
// accepts it as a forward-only schedule; with communication inserted it is what `baton eval` and
// train.eval_every run. Under either chunk layout (action.h).
Schedule ForwardOnly(int stages, int microbatches, int chunks = 1,
                     ChunkLayout layout = ChunkLayout::kLoop);

// Names MakeSchedule() accepts: kScheduleKinds' (scheduler/schedule_kinds.h), in its order.
const std::vector<std::string>& ScheduleNames();

// The chunks per stage the named schedule runs with when `requested` were asked for, by its
// ChunkRule: 2 for the V schedules (requested 1, the default, or 2); `requested` for those of
// many chunks (>= 2); 1 for the others (requested 1). Throws baton::Error saying
// why for any other request or an unknown name.
int ChunksFor(std::string_view name, int requested);

// Looks up a generator by name. `chunks` as ChunksFor() accepts it, except that "interleaved" also
// takes 1 (it is then 1F1B). Each generator sets the schedule's layout (kV for the V schedules).
Schedule MakeSchedule(std::string_view name, int stages, int microbatches, int chunks = 1);

}  // namespace baton
