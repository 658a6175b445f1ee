#include "worker/plan_codec.h"

#include "core/error.h"
#include "proto/baton.pb.h"

namespace baton {

std::string EncodePlan(const WorkerPlan& plan) {
  pb::JobPlan message;
  message.set_job_id(plan.job_id);
  message.set_config_yaml(plan.config_yaml);
  message.set_world_size(plan.num_ranks);
  message.set_num_stages(plan.num_ranks);
  message.set_schedule(plan.schedule_name);
  message.set_chunks(plan.num_chunks);
  for (int r = 0; r < plan.num_ranks; ++r) {
    pb::StagePlan* stage = message.add_stages();
    stage->set_stage(r);
    stage->set_rank(r);
    const auto& ranges = plan.chunk_ranges.at(static_cast<size_t>(r));
    stage->set_first_layer(ranges.front().first);
    stage->set_last_layer(ranges.back().last);
    for (int c = 0; c < static_cast<int>(ranges.size()); ++c) {
      pb::ChunkPlan* chunk = stage->add_chunks();
      chunk->set_chunk(c);
      chunk->set_virtual_stage(c * plan.num_ranks + r);
      chunk->set_first_layer(ranges[static_cast<size_t>(c)].first);
      chunk->set_last_layer(ranges[static_cast<size_t>(c)].last);
    }
    if (r < static_cast<int>(plan.predicted_memory.size())) {
      for (const auto& [key, bytes] : plan.predicted_memory[static_cast<size_t>(r)]) {
        (*stage->mutable_predicted_memory())[key] = bytes;
      }
    }
  }
  (*message.mutable_extra())["schedule_csv"] = plan.schedule_csv;
  (*message.mutable_extra())["resume_dir"] = plan.resume_dir;
  (*message.mutable_extra())["attempt"] = std::to_string(plan.attempt);
  return message.SerializeAsString();
}

WorkerPlan DecodePlan(const std::string& bytes) {
  pb::JobPlan message;
  BATON_CHECK(message.ParseFromString(bytes), "the job plan from the coordinator is malformed");
  WorkerPlan plan;
  plan.job_id = message.job_id();
  plan.config_yaml = message.config_yaml();
  plan.num_ranks = message.num_stages();
  plan.num_chunks = message.chunks();
  plan.schedule_name = message.schedule();
  BATON_CHECK(plan.num_ranks >= 1 && message.stages_size() == plan.num_ranks,
              "the job plan has {} stage entries for {} stages", message.stages_size(),
              plan.num_ranks);
  for (const pb::StagePlan& stage : message.stages()) {
    std::vector<LayerRange> ranges;
    for (const pb::ChunkPlan& chunk : stage.chunks()) {
      ranges.push_back({chunk.first_layer(), chunk.last_layer()});
    }
    BATON_CHECK(static_cast<int>(ranges.size()) == plan.num_chunks,
                "stage {} of the job plan has {} chunks, expected {}", stage.stage(), ranges.size(),
                plan.num_chunks);
    plan.chunk_ranges.push_back(std::move(ranges));
    std::map<std::string, int64_t> memory(stage.predicted_memory().begin(),
                                          stage.predicted_memory().end());
    plan.predicted_memory.push_back(std::move(memory));
  }
  const auto csv = message.extra().find("schedule_csv");
  BATON_CHECK(csv != message.extra().end(), "the job plan has no schedule");
  plan.schedule_csv = csv->second;
  if (const auto it = message.extra().find("resume_dir"); it != message.extra().end()) {
    plan.resume_dir = it->second;
  }
  if (const auto it = message.extra().find("attempt"); it != message.extra().end()) {
    plan.attempt = std::stoi(it->second);
  }
  return plan;
}

}  // namespace baton
