#include "plan/codec.h"

#include <algorithm>

#include "config/config_proto.h"
#include "core/error.h"
#include "proto/baton.pb.h"

namespace baton {
namespace {

// clang-format off
constexpr std::pair<ActionKind, pb::ActionKind> kActionKinds[] = {
    {ActionKind::kForward, pb::ACTION_KIND_FORWARD},
    {ActionKind::kBackward, pb::ACTION_KIND_BACKWARD},
    {ActionKind::kBackwardInput, pb::ACTION_KIND_BACKWARD_INPUT},
    {ActionKind::kBackwardWeight, pb::ACTION_KIND_BACKWARD_WEIGHT},
    {ActionKind::kSendForward, pb::ACTION_KIND_SEND_FORWARD},
    {ActionKind::kRecvForward, pb::ACTION_KIND_RECV_FORWARD},
    {ActionKind::kSendBackward, pb::ACTION_KIND_SEND_BACKWARD},
    {ActionKind::kRecvBackward, pb::ACTION_KIND_RECV_BACKWARD}};
constexpr std::pair<LayerKind, pb::LayerKind> kLayerKinds[] = {
    {LayerKind::kEmbedding, pb::LAYER_KIND_EMBEDDING},
    {LayerKind::kBlock, pb::LAYER_KIND_BLOCK},
    {LayerKind::kMlpBlock, pb::LAYER_KIND_MLP_BLOCK},
    {LayerKind::kHead, pb::LAYER_KIND_HEAD}};
// clang-format on

template <typename A, typename B, size_t N>
B Forward(const std::pair<A, B> (&table)[N], A value) {
  for (const auto& [a, b] : table) {
    if (a == value) return b;
  }
  BATON_FAIL("value {} has no wire form", static_cast<int>(value));
}
template <typename A, typename B, size_t N>
A Backward(const std::pair<A, B> (&table)[N], B value, const char* what) {
  for (const auto& [a, b] : table) {
    if (b == value) return a;
  }
  BATON_FAIL("the job plan has an unknown {} ({})", what, static_cast<int>(value));
}

std::chrono::milliseconds Ms(int64_t ms) { return std::chrono::milliseconds(ms); }

pb::ActionKind ToProto(ActionKind kind) { return Forward(kActionKinds, kind); }
ActionKind FromProto(pb::ActionKind kind) { return Backward(kActionKinds, kind, "action kind"); }

void ToProto(const Action& action, pb::Action* out) {
  out->set_kind(ToProto(action.kind));
  out->set_microbatch(action.microbatch);
  out->set_chunk(action.chunk);
}
Action FromProto(const pb::Action& action, int rank) {
  return {rank, FromProto(action.kind()), action.microbatch(), action.chunk()};
}

void ToProto(const MemoryFigures& figures, pb::MemoryFigures* out) {
  out->set_params(figures[MemCategory::kParams]);
  out->set_grads(figures[MemCategory::kGrads]);
  out->set_optimizer(figures[MemCategory::kOptimizer]);
  out->set_activations(figures[MemCategory::kActivations]);
  out->set_comm(figures[MemCategory::kComm]);
  out->set_workspace(figures[MemCategory::kWorkspace]);
  out->set_checkpoint(figures[MemCategory::kCheckpoint]);
  out->set_total(figures.total);
}
MemoryFigures FromProto(const pb::MemoryFigures& m) {
  MemoryFigures figures;
  figures.bytes = {m.params(), m.grads(),     m.optimizer(), m.activations(),
                   m.comm(),   m.workspace(), m.checkpoint()};
  figures.total = m.total();
  return figures;
}

// clang-format off
constexpr std::pair<TraceSpan::Kind, pb::TraceSpan::Kind> kSpanKinds[] = {
    {TraceSpan::Kind::kCompute, pb::TraceSpan::KIND_COMPUTE},
    {TraceSpan::Kind::kWait, pb::TraceSpan::KIND_WAIT},
    {TraceSpan::Kind::kOptimizer, pb::TraceSpan::KIND_OPTIMIZER},
    {TraceSpan::Kind::kStepStart, pb::TraceSpan::KIND_STEP_START},
    {TraceSpan::Kind::kExchange, pb::TraceSpan::KIND_EXCHANGE}};
// clang-format on

}  // namespace

std::string EncodeJobPlan(const Plan& plan, const Launch& launch) {
  pb::JobPlan m;
  m.set_job_id(launch.job_id);
  ToProto(plan.config, m.mutable_config());
  pb::ModelDims* dims = m.mutable_dims();
  dims->set_vocab_size(plan.dims.vocab_size);
  dims->set_context(plan.dims.context);
  dims->set_num_layers(plan.dims.num_layers);
  dims->set_num_heads(plan.dims.num_heads);
  dims->set_width(plan.dims.width);
  dims->set_share_group(plan.dims.share_group);
  dims->set_share_attention(plan.dims.share_attention);
  dims->set_share_mlp(plan.dims.share_mlp);
  dims->set_low_rank_attn(plan.dims.low_rank_attn);
  dims->set_low_rank_mlp(plan.dims.low_rank_mlp);
  dims->set_llama(plan.dims.llama());
  dims->set_qwen2(plan.dims.qwen2());
  dims->set_mistral(plan.dims.mistral());
  dims->set_qwen3(plan.dims.qwen3());
  dims->set_sliding_window(plan.dims.sliding_window);
  dims->set_head_size(plan.dims.head_size);
  dims->set_num_kv_heads(plan.dims.num_kv_heads);
  dims->set_mlp_hidden(plan.dims.mlp_hidden);
  dims->set_norm_eps(plan.dims.norm_eps);
  dims->set_rope_theta(plan.dims.rope.theta);
  dims->set_rope_factor(plan.dims.rope.factor);
  dims->set_rope_low_freq_factor(plan.dims.rope.low_freq_factor);
  dims->set_rope_high_freq_factor(plan.dims.rope.high_freq_factor);
  dims->set_rope_original_context(plan.dims.rope.original_context);
  dims->set_untied_embeddings(!plan.dims.tie_embeddings);
  if (plan.dims.moe.enabled()) {
    const MoeDims& m = plan.dims.moe;
    pb::MoeDims* moe = dims->mutable_moe();
    moe->set_num_experts(m.num_experts);
    moe->set_top_k(m.top_k);
    moe->set_expert_hidden(m.expert_hidden);
    moe->set_shared_experts(m.shared_experts);
    moe->set_shared_hidden(m.shared_hidden);
    moe->set_shared_gate(m.shared_gate);
    moe->set_first_dense(m.first_dense);
    moe->set_every(m.every);
    moe->set_topk_softmax(m.router == MoeDims::Router::kTopkSoftmax);
    moe->set_norm_topk_prob(m.norm_topk_prob);
    moe->set_aux_loss_coef(m.aux_loss_coef);
    moe->set_z_loss_coef(m.z_loss_coef);
    moe->set_capacity_factor(m.capacity_factor);
    moe->set_sigmoid_bias(m.router == MoeDims::Router::kSigmoidBias);
    moe->set_bias_update_rate(m.bias_update_rate);
  }
  for (size_t i = 0; i < plan.graph.size(); ++i) {
    const LayerSpec& spec = plan.graph[i];
    pb::Layer* layer = m.add_graph();
    layer->set_kind(Forward(kLayerKinds, spec.kind));
    layer->set_index(spec.index);
    layer->set_block_index(spec.block_index);
    layer->set_name(spec.name);
    if (i < plan.layer_costs.size()) layer->set_cost(plan.layer_costs[i]);
  }
  m.set_schedule(plan.schedule.name);
  m.set_micro_batches(plan.schedule.microbatches);
  m.set_chunks(plan.schedule.chunks);
  m.set_chunk_layout(std::string(LayoutName(plan.schedule.layout)));
  const int p = plan.num_stages();
  for (int r = 0; r < p; ++r) {
    pb::StagePlan* stage = m.add_stages();
    stage->set_stage(r);
    stage->set_rank(r);
    const std::vector<LayerRange> ranges = plan.ChunkRanges(r);
    for (int c = 0; c < static_cast<int>(ranges.size()); ++c) {
      pb::ChunkPlan* chunk = stage->add_chunks();
      chunk->set_chunk(c);
      chunk->set_virtual_stage(VirtualStage(r, c, p, plan.schedule.layout));
      chunk->set_first_layer(ranges[static_cast<size_t>(c)].first);
      chunk->set_last_layer(ranges[static_cast<size_t>(c)].last);
    }
    for (const Action& a : plan.schedule.per_stage.at(static_cast<size_t>(r))) {
      ToProto(a, stage->add_actions());
    }
    for (const Action& a : plan.eval_schedule.per_stage.at(static_cast<size_t>(r))) {
      ToProto(a, stage->add_eval_actions());
    }
  }
  m.set_eval_batches(plan.eval_batches);
  m.set_sends_complete_before_compute(plan.sends_complete_before_compute);
  for (const TiedGroup& group : plan.tied) {
    pb::TiedGroup* tied = m.add_tied();
    tied->set_param(group.param);
    for (int layer : group.layers) tied->add_layers(layer);
    for (int stage : group.stages) tied->add_stages(stage);
  }
  pb::Timeouts* timeouts = m.mutable_timeouts();
  timeouts->set_wait_ms(plan.timeouts.wait.count());
  timeouts->set_startup_ms(plan.timeouts.startup.count());
  timeouts->set_checkpoint_ms(plan.timeouts.checkpoint.count());
  timeouts->set_heartbeat_interval_ms(plan.timeouts.heartbeat_interval.count());
  m.set_memory_budget(plan.memory_budget);
  m.set_partition_bound(plan.partition_bound);
  m.set_resume_dir(launch.resume_dir);
  m.set_attempt(launch.attempt);
  m.set_evaluate_only(launch.evaluate_only);
  for (const LrSegment& segment : launch.lr_segments) {
    pb::LrSegment* out = m.add_lr_segments();
    out->set_from(segment.from);
    out->set_to(segment.to);
  }
  return m.SerializeAsString();
}

Plan DecodeJobPlan(const std::string& bytes, Launch* launch) {
  pb::JobPlan m;
  BATON_CHECK(m.ParseFromString(bytes), "the job plan from the coordinator is malformed");
  Plan plan;
  plan.config = FromProto(m.config());
  const pb::ModelDims& dims = m.dims();
  plan.dims = {dims.vocab_size(), dims.context(), dims.num_layers(), dims.num_heads(),
               dims.width()};
  plan.dims.share_group = std::max(1, dims.share_group());
  plan.dims.share_attention = dims.share_attention();
  plan.dims.share_mlp = dims.share_mlp();
  plan.dims.low_rank_attn = dims.low_rank_attn();
  plan.dims.low_rank_mlp = dims.low_rank_mlp();
  plan.dims.family = !dims.llama()    ? ModelFamily::kGpt2
                     : dims.qwen2()   ? ModelFamily::kQwen2
                     : dims.mistral() ? ModelFamily::kMistral
                     : dims.qwen3()   ? ModelFamily::kQwen3
                                      : ModelFamily::kLlama;
  plan.dims.sliding_window = dims.sliding_window();
  plan.dims.head_size = dims.head_size();
  plan.dims.num_kv_heads = dims.num_kv_heads();
  plan.dims.mlp_hidden = dims.mlp_hidden();
  if (dims.norm_eps() > 0.0f) plan.dims.norm_eps = dims.norm_eps();  // 0: an older plan
  if (dims.rope_theta() > 0.0) {
    plan.dims.rope = {dims.rope_theta(), dims.rope_factor(), dims.rope_low_freq_factor(),
                      dims.rope_high_freq_factor(), dims.rope_original_context()};
  }
  plan.dims.tie_embeddings = !dims.untied_embeddings();
  if (dims.has_moe() && dims.moe().num_experts() > 0) {
    const pb::MoeDims& m = dims.moe();
    plan.dims.moe = {m.num_experts(),
                     m.top_k(),
                     m.expert_hidden(),
                     m.shared_experts(),
                     m.shared_hidden(),
                     m.shared_gate(),
                     m.first_dense(),
                     std::max(1, m.every()),
                     m.sigmoid_bias()   ? MoeDims::Router::kSigmoidBias
                     : m.topk_softmax() ? MoeDims::Router::kTopkSoftmax
                                        : MoeDims::Router::kSoftmaxTopk,
                     m.norm_topk_prob(),
                     m.aux_loss_coef(),
                     m.z_loss_coef(),
                     m.capacity_factor(),
                     m.bias_update_rate()};
  }
  Validate(plan.dims);
  for (const pb::Layer& layer : m.graph()) {
    BATON_CHECK(layer.index() == static_cast<int>(plan.graph.size()),
                "the job plan's layer {} sits at position {}", layer.index(), plan.graph.size());
    plan.graph.push_back({Backward(kLayerKinds, layer.kind(), "layer kind"), layer.index(),
                          layer.block_index(), layer.name()});
    plan.layer_costs.push_back(layer.cost());
  }
  const int p = plan.num_stages();
  const int v = m.chunks();
  BATON_CHECK(v >= 1 && m.stages_size() == p,
              "the job plan has {} stages and {} chunks for {} ranks", m.stages_size(), v, p);
  plan.schedule.name = m.schedule();
  plan.schedule.stages = p;
  plan.schedule.microbatches = m.micro_batches();
  plan.schedule.chunks = v;
  plan.schedule.layout =
      m.chunk_layout().empty() ? ChunkLayout::kLoop : ParseLayout(m.chunk_layout());
  plan.virtual_stages.resize(static_cast<size_t>(p * v));
  const int num_layers = static_cast<int>(plan.graph.size());
  for (int r = 0; r < p; ++r) {
    const pb::StagePlan& stage = m.stages(r);
    BATON_CHECK(stage.rank() == r && stage.chunks_size() == v,
                "stage entry {} of the job plan is for rank {} with {} chunks", r, stage.rank(),
                stage.chunks_size());
    for (int c = 0; c < v; ++c) {
      const pb::ChunkPlan& chunk = stage.chunks(c);
      BATON_CHECK(0 <= chunk.first_layer() && chunk.first_layer() <= chunk.last_layer() &&
                      chunk.last_layer() < num_layers,
                  "rank {} chunk {} of the job plan holds layers {}-{} of {}", r, c,
                  chunk.first_layer(), chunk.last_layer(), num_layers);
      const int virtual_stage = VirtualStage(r, c, p, plan.schedule.layout);
      BATON_CHECK(chunk.virtual_stage() == virtual_stage,
                  "rank {} chunk {} of the job plan is virtual stage {}, not {} ({} layout)", r, c,
                  chunk.virtual_stage(), virtual_stage, LayoutName(plan.schedule.layout));
      plan.virtual_stages[static_cast<size_t>(virtual_stage)] = {chunk.first_layer(),
                                                                 chunk.last_layer()};
    }
    std::vector<Action>& program = plan.schedule.per_stage.emplace_back();
    for (const pb::Action& a : stage.actions()) program.push_back(FromProto(a, r));
    std::vector<Action>& eval_program = plan.eval_schedule.per_stage.emplace_back();
    for (const pb::Action& a : stage.eval_actions()) eval_program.push_back(FromProto(a, r));
  }
  plan.eval_schedule.name = "forward";
  plan.eval_schedule.stages = p;
  plan.eval_schedule.microbatches = m.micro_batches();
  plan.eval_schedule.chunks = v;
  plan.eval_schedule.layout = plan.schedule.layout;
  plan.eval_batches = m.eval_batches();
  plan.sends_complete_before_compute = m.sends_complete_before_compute();
  for (const pb::TiedGroup& tied : m.tied()) {
    plan.tied.push_back({tied.param(),
                         {tied.layers().begin(), tied.layers().end()},
                         {tied.stages().begin(), tied.stages().end()}});
  }
  const pb::Timeouts& t = m.timeouts();
  plan.timeouts = {Ms(t.wait_ms()), Ms(t.startup_ms()), Ms(t.checkpoint_ms()),
                   Ms(t.heartbeat_interval_ms())};
  BATON_CHECK(plan.timeouts.wait.count() > 0 && plan.timeouts.heartbeat_interval.count() > 0,
              "the job plan has no timeouts");
  plan.memory_budget = m.memory_budget();
  plan.partition_bound = m.partition_bound();
  if (launch != nullptr) {
    *launch = {m.job_id(), m.resume_dir(), m.attempt(), m.evaluate_only(), {}};
    for (const pb::LrSegment& segment : m.lr_segments()) {
      launch->lr_segments.push_back({segment.from(), segment.to()});
    }
  }
  return plan;
}

std::string EncodeRankResult(const RankResult& result) {
  pb::RankResult m;
  m.set_rank(result.rank);
  for (const auto& [layer, digest] : result.digests) {
    pb::LayerDigest* d = m.add_digests();
    d->set_layer(layer);
    d->set_digest(digest);
  }
  ToProto(result.memory_peak, m.mutable_memory_peak());
  m.set_compute_s(result.compute_s);
  m.set_wall_s(result.wall_s);
  m.set_holds_head(result.holds_head);
  if (result.eval) {
    pb::EvalResult* eval = m.mutable_eval();
    eval->set_loss(result.eval->loss);
    eval->set_batches(result.eval->batches);
    eval->set_tokens(result.eval->tokens);
    eval->set_seconds(result.eval->seconds);
  }
  for (const StepTrace& step : result.trace) {
    pb::StepTrace* trace = m.add_trace();
    trace->set_step(step.step);
    for (const TraceSpan& s : step.spans) {
      pb::TraceSpan* span = trace->add_spans();
      span->set_kind(Forward(kSpanKinds, s.kind));
      if (s.HasAction()) {
        ToProto(s.action, span->mutable_action());
      }
      span->set_start_us(s.start_us);
      span->set_end_us(s.end_us);
    }
  }
  return m.SerializeAsString();
}

RankResult DecodeRankResult(const std::string& bytes) {
  pb::RankResult m;
  BATON_CHECK(m.ParseFromString(bytes), "a rank's result is malformed");
  RankResult result;
  result.rank = m.rank();
  for (const pb::LayerDigest& d : m.digests()) result.digests.emplace_back(d.layer(), d.digest());
  result.memory_peak = FromProto(m.memory_peak());
  result.compute_s = m.compute_s();
  result.wall_s = m.wall_s();
  result.holds_head = m.holds_head();
  if (m.has_eval()) {
    result.eval =
        EvalRecord{m.eval().loss(), m.eval().batches(), m.eval().tokens(), m.eval().seconds()};
  }
  for (const pb::StepTrace& trace : m.trace()) {
    StepTrace& step = result.trace.emplace_back();
    step.step = trace.step();
    for (const pb::TraceSpan& span : trace.spans()) {
      TraceSpan& s = step.spans.emplace_back();
      s.kind = Backward(kSpanKinds, span.kind(), "trace span kind");
      if (s.HasAction()) {
        s.action = FromProto(span.action(), result.rank);
      }
      s.start_us = span.start_us();
      s.end_us = span.end_us();
    }
  }
  return result;
}

}  // namespace baton
