// What a user sees when a pipeline goes wrong: a stalled peer is named, with every stage's
// blocked action in one table.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "core/hash.h"
#include "tests/baton_process.h"

namespace baton::testing {
namespace {

// The fault hooks live in the tests' baton_faults binary only: the same stall asked of `baton`
// does nothing, and the job trains to its end.
TEST(FailureTest, TheBatonBinaryCarriesNoFaultHooks) {
  const CommandResult result =
      RunShell("cd '" + SourceDir() + "' && BATON_TEST_STALL=1:2 '" + BatonBinary() +
               "' run configs/gpt-tiny.yaml --set train.steps=3 --set parallel.stages=2"
               " --set parallel.timeout_s=5 --set output.final_checkpoint=false"
               " --set output.dir=" +
               TempDir("no-hooks"));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output.find("BATON_TEST_STALL"), std::string::npos) << result.output;
}

// device.type=cuda where no GPU can be used: one error naming the cause, before the coordinator
// or any worker starts (it used to start all four and blame whichever stage failed first).
TEST(FailureTest, NoGpuIsOneErrorBeforeAnyWorkerStarts) {
  const std::string root = TempDir("no-gpu");
  const CommandResult result =
      RunShell("cd '" + SourceDir() + "' && '" + BatonBinary() +
               "' run configs/gpt-tiny.yaml --set device.type=cuda --set train.steps=1"
               " --set output.dir=" +
               root);
  if (result.exit_code == 0) GTEST_SKIP() << "this machine has a GPU: " << result.output;
  // "no CUDA device: ...", or that the binary was built without CUDA (the sanitizer builds).
  EXPECT_NE(result.output.find("baton: error: device.type is cuda, and this machine cannot run "
                               "it: "),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("Set device.type=cpu"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("coordinator on"), std::string::npos) << result.output;
  EXPECT_FALSE(AnyWorkerLogged(result.output)) << result.output;
}

TEST(FailureTest, StalledPeerTimesOutWithATableNamingStageActionAndPeer) {
  // Stage 1 stops answering at step 2 (it sleeps; its heartbeats go on): stage 0 waits for the
  // gradient of its first backward and gives up after parallel.timeout_s. Start-up waits (Gloo's
  // rendezvous, the ready barrier) take at least 60 s whatever timeout_s says, so a slow start on
  // a loaded machine is no stall; 5 s is far longer than any wait of step 1 here.
  const std::string dir = TempDir("stalled-peer");
  const CommandResult result =
      RunShell("cd '" + SourceDir() + "' && BATON_TEST_STALL=1:2 '" + BatonFaultsBinary() +
               "' run configs/gpt-tiny.yaml --set train.steps=4 --set parallel.stages=2"
               " --set parallel.timeout_s=5 --set output.dir=" +
               dir);
  EXPECT_NE(result.exit_code, 0) << result.output;
  // Stage 0 gives up on its first exchange with stage 1: the send of micro-batch 0's activation
  // (when sends complete before the next compute) or the wait for its gradient.
  EXPECT_NE(result.output.find("timed out"), std::string::npos) << result.output;
  // The table: rank, stage, status, blocked on, micro-batch, peer, waiting seconds.
  EXPECT_NE(result.output.find("blocked on"), std::string::npos) << result.output;
  const std::regex row(R"(\n\s+0\s+0\s+failed\s+(SEND_F|RECV_B)\s+0\s+1\s+[0-9.]+\s)");
  EXPECT_TRUE(std::regex_search(result.output, row)) << result.output;
  const std::regex stalled(R"(\n\s+1\s+1\s+running\s)");
  EXPECT_TRUE(std::regex_search(result.output, stalled)) << result.output;
  // The flight recorder: each rank's open entry, and stage 1 as the likely culprit (waited for,
  // waiting for no peer: it began step 2 and ran nothing), all of it in flight_recorder.json.
  const std::regex waiting(
      R"(stage 0 \(rank 0\): (SEND_F|RECV_B) mb 0 waiting for rank 1, 262144 bytes \(step 2\))");
  EXPECT_TRUE(std::regex_search(result.output, waiting)) << result.output;
  EXPECT_NE(result.output.find("likely culprit: stage 1 (rank 1): 1 rank(s) wait for it (stage 0 "
                               "(rank 0)), and it waits for no peer: it is at step 2 begun, no "
                               "action run yet"),
            std::string::npos)
      << result.output;
  const nlohmann::json recorded = ReadJson(dir + "/flight_recorder.json");
  ASSERT_EQ(recorded["ranks"].size(), 2u) << recorded.dump();
  const nlohmann::json& stage1 = recorded["ranks"][1]["entries"];
  ASSERT_FALSE(stage1.empty()) << recorded.dump();
  EXPECT_EQ(stage1.back()["what"], "STEP") << recorded.dump();
  EXPECT_EQ(stage1.back()["step"], 2) << recorded.dump();
  EXPECT_EQ(stage1.back()["end_us"], 0) << recorded.dump();
  // Step 1 is there before it: stage 1's forward of every micro-batch.
  std::set<int> step_one_forwards;
  for (const auto& entry : stage1) {
    if (entry["step"] == 1 && entry["what"] == "F") {
      step_one_forwards.insert(entry["microbatch"].get<int>());
    }
  }
  EXPECT_EQ(step_one_forwards, (std::set<int>{0, 1, 2, 3})) << recorded.dump();
}

// Replica 1 (world rank 1 of a one-stage job of two replicas) stalls at step 2 of `config` run
// with `sets` and a 5 s wait: the job fails with `failed` in its output, the rank table (rank,
// stage, replica, status, blocked on, ...) shows rank 0 failed in `status`, and the flight
// recorder's summary names replica 1 the likely culprit.
void ExpectAStalledReplicaNamed(const std::string& name, const std::string& config,
                                const std::string& sets, const std::regex& failed,
                                const std::string& status) {
  const std::string dir = TempDir(name);
  const CommandResult result = RunShell(
      "cd '" + SourceDir() + "' && BATON_TEST_STALL=1:2 '" + BatonFaultsBinary() + "' run " +
      config + " --set train.steps=4 --set parallel.stages=1 --set parallel.replicas=2 " + sets +
      " --set parallel.timeout_s=5 --set output.dir=" + dir);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_TRUE(std::regex_search(result.output, failed)) << result.output;
  const std::regex row("\\n\\s+0\\s+0\\s+0\\s+failed\\s+" + status + "\\s");
  EXPECT_TRUE(std::regex_search(result.output, row)) << result.output;
  EXPECT_NE(result.output.find("likely culprit: stage 0 replica 1 (rank 1)"), std::string::npos)
      << result.output;
}

// ZeRO-2 reduces a block's gradients inside its backward: when replica 1 stalls at step 2,
// replica 0 gives up in the reduce-scatter of the last block, and the error and the rank table
// say so (not a backward that seems to hang).
TEST(FailureTest, AStalledReplicaUnderZeroTwoIsNamedInALayersReduceScatter) {
  ExpectAStalledReplicaNamed(
      "stalled-zero2", "configs/gpt-tiny.yaml", "--set parallel.zero=2",
      std::regex(R"(step 2: the data-parallel reduce-scatter of layer [0-9]+'s gradients of )"
                 R"(stage 0 with its other replicas failed; a replica of stage 0 is dead or hung)"),
      "ALLREDUCE");
}

// ZeRO-3 gathers a layer's parameters before each use: when replica 1 stalls at step 2, replica
// 0 gives up gathering a layer for step 2's first forward (the first one whose sends need
// replica 1 to take them), and says so.
TEST(FailureTest, AStalledReplicaUnderZeroThreeIsNamedInALayersAllGather) {
  ExpectAStalledReplicaNamed(
      "stalled-zero3", "configs/gpt-tiny.yaml", "--set parallel.zero=3",
      std::regex(R"(step 2: the data-parallel all-gather of layer [0-9]+'s parameters of stage 0 )"
                 R"(with its other replicas failed; a replica of stage 0 is dead or hung)"),
      "ALLGATHER");
}

// Expert parallelism moves a layer's rows inside its forward: when replica 1 (the other member
// of the expert group) stalls at step 2, replica 0 gives up in the experts' all-to-all of step
// 2's first forward, and the error and the rank table say so.
TEST(FailureTest, AStalledExpertGroupMemberIsNamedInTheExpertsAllToAll) {
  ExpectAStalledReplicaNamed(
      "stalled-experts", "configs/moe-tiny.yaml",
      "--set model.num_layers=2 --set model.width=32 --set model.context=16 "
      "--set parallel.experts=2",
      std::regex(R"(step 2, F of micro-batch [0-9]+: the experts' all-to-all of stage 0 with its )"
                 R"(expert group failed; a replica of stage 0 is dead or hung)"),
      "EP_ALLTOALL");
}

// 2 stages x 2 tensor ranks: world ranks 0, 1 are stage 0 and 2, 3 stage 1 (docs/parallel.md).
// Rank 3 (stage 1, tensor rank 1) stalls: rank 1 (stage 0, tensor rank 1) waits on it, and the
// table names that peer by its world rank, 3, not by its stage, 1 (which is rank 1 itself).
TEST(FailureTest, AWaitOnAnotherTensorRanksStageNamesThePeersWorldRank) {
  const CommandResult result =
      RunShell("cd '" + SourceDir() + "' && BATON_TEST_STALL=3:2 '" + BatonFaultsBinary() +
               "' run configs/gpt-tiny.yaml --set train.steps=4 --set parallel.stages=2"
               " --set parallel.tensor=2 --set parallel.timeout_s=5 --set output.dir=" +
               TempDir("stalled-tensor-peer"));
  EXPECT_NE(result.exit_code, 0) << result.output;
  // Columns: rank, stage, tensor, status, blocked on, mb, peer.
  const std::regex row(R"(\n\s+1\s+0\s+1\s+\w+\s+(SEND_F|RECV_B)\s+0\s+3\s+[0-9.]+\s)");
  EXPECT_TRUE(std::regex_search(result.output, row)) << result.output;
  EXPECT_EQ(result.output.find("peer rank 1,"), std::string::npos) << result.output;
  // The flight recorder blames rank 3 alone: rank 2 (stage 1, tensor rank 0) computes micro-batch
  // 0's forward and waits in its tensor all-reduce for rank 3, so although rank 0 waits for rank
  // 2, rank 2 waits for a peer itself.
  EXPECT_NE(result.output.find("stage 1 tensor 0 (rank 2): TP_ALLREDUCE mb 0 waiting for rank 3"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("likely culprit: stage 1 tensor 1 (rank 3): 2 rank(s) wait for it"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("likely culprit: stage 1 tensor 0 (rank 2)"), std::string::npos)
      << result.output;
}

// Trains gpt-tiny on 2 stages with `settings` ("--set k=v ..."), freezes stage 1 whole (SIGSTOP,
// its heartbeats too) after step 2, and returns the launcher's output once the job has ended.
std::string FreezeStageOneAndWaitForTheEnd(const std::string& name, const std::string& settings) {
  const std::string dir = TempDir(name);
  const std::string log = dir + "/log";
  const int shell =
      Background("'" + BatonBinary() +
                     "' run configs/gpt-tiny.yaml --set train.steps=100000 --set train.log_every=1"
                     " --set parallel.stages=2 " +
                     settings + " --set output.dir=" + dir,
                 log);
  if (!WaitFor(log, "step     2/", 120)) {
    ADD_FAILURE() << ReadFile(log);
    return "";
  }
  const int victim = WorkerPid(shell, 1);
  if (victim <= 0) {
    ADD_FAILURE() << "no stage 1 worker";
    return "";
  }
  kill(victim, SIGSTOP);
  const bool ended = WaitFor(log, "exit=", 120);
  kill(victim, SIGKILL);
  EXPECT_TRUE(ended) << ReadFile(log);
  return ReadFile(log);
}

TEST(FailureTest, AWorkerThatStopsAnsweringIsDeclaredDeadAndTheJobStops) {
  // The coordinator declares the frozen stage dead after parallel.heartbeat_timeout_s and the job
  // aborts everywhere. Live workers heartbeat every 0.5 s, so 5 s of silence is no live worker
  // on a loaded machine.
  const std::string text = FreezeStageOneAndWaitForTheEnd(
      "frozen", "--set parallel.heartbeat_timeout_s=5 --set parallel.timeout_s=600");
  EXPECT_NE(text.find("exit=1"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 1 (rank 1) sent no heartbeat"), std::string::npos) << text;
}

// The other way a frozen peer shows: a neighbour's wait on it (a receive, a send it does not
// take, the step-end all-reduce: which one depends on where it froze) times out (timeout_s)
// before the heartbeat does. The neighbour reports the timeout and exits 1, cleanly: its pending
// Gloo operations are closed before its memory goes (it used to die of SIGSEGV when the job's
// abort later woke a pending receive).
TEST(FailureTest, ATimedOutWaitFailsTheJobWithoutACrash) {
  const std::string text = FreezeStageOneAndWaitForTheEnd(
      "wait-timeout", "--set parallel.heartbeat_timeout_s=600 --set parallel.timeout_s=5");
  EXPECT_NE(text.find("exit=1"), std::string::npos) << text;
  EXPECT_NE(text.find("stage 0 failed"), std::string::npos) << text;
  EXPECT_NE(text.find("timed out after 5.0 s"), std::string::npos) << text;
  EXPECT_EQ(text.find("killed by signal"), std::string::npos) << text;
}

// A model.init_from file that is not GPT-2 weights is one error from the launcher naming the key
// and what the file is, before any worker starts (each worker used to fail on it alone).
TEST(FailureTest, InitFromThatIsNotGpt2WeightsIsOneErrorNamingWhatItIs) {
  const std::string root = TempDir("init-from");
  const auto run = [&](const std::string& init_from) {
    return RunShell("cd '" + SourceDir() + "' && '" + BatonBinary() +
                    "' run configs/gpt-tiny.yaml --set train.steps=1 --set output.dir=" + root +
                    " --set model.init_from=" + init_from);
  };
  const CommandResult text = run("README.md");
  EXPECT_NE(text.exit_code, 0);
  EXPECT_NE(text.output.find("baton: error: --set model.init_from: model.init_from README.md is "
                             "not a GPT-2 safetensors file, a Baton checkpoint or a Hugging Face "
                             "folder: README.md: the header length field exceeds"),
            std::string::npos)
      << text.output;
  EXPECT_FALSE(AnyWorkerLogged(text.output)) << text.output;
  const std::string shard = "tests/fixtures/llama-hf/model-00001-of-00003.safetensors";
  const CommandResult llama = run(shard);
  EXPECT_NE(llama.exit_code, 0);
  EXPECT_NE(llama.output.find("model.init_from " + shard +
                              " holds a Llama's weights (model.embed_tokens.weight), and this "
                              "config's model is GPT-2: give the Hugging Face folder"),
            std::string::npos)
      << llama.output;
  EXPECT_FALSE(AnyWorkerLogged(llama.output)) << llama.output;
  const CommandResult other = run("tests/fixtures/llama-hf/model-00002-of-00003.safetensors");
  EXPECT_NE(other.output.find("holds no GPT-2 embedding (transformer.wte.weight, nor wte.weight)"),
            std::string::npos)
      << other.output;
}

TEST(FailureTest, UnreadableDataIsAClearErrorNamingTheFile) {
  const CommandResult result =
      RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "data.path=/nonexistent/corpus.txt",
                "--set", "train.steps=1", "--set", "parallel.stages=2"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("/nonexistent/corpus.txt"), std::string::npos) << result.output;
  // Found by the launcher, naming the key and where it was set (the --set, not the file), before
  // any worker starts.
  EXPECT_NE(result.output.find("--set data.path=/nonexistent/corpus.txt: no such file or folder"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("gpt-tiny.yaml: data.path"), std::string::npos) << result.output;
  // Set in the file: the file is named.
  const std::string yaml = TempDir("missing-data") + "/missing.yaml";
  std::string text = ReadFile(SourceDir() + "/configs/gpt-tiny.yaml");
  text.replace(text.find("/usr/share/common-licenses"), 26, "/nonexistent/in-file.txt");
  std::ofstream(yaml) << text;
  const CommandResult in_file = RunBaton({"run", yaml, "--set", "train.steps=1"});
  EXPECT_NE(in_file.output.find("missing.yaml: data.path /nonexistent/in-file.txt: no such file "
                                "or folder"),
            std::string::npos)
      << in_file.output;
  EXPECT_FALSE(AnyWorkerLogged(result.output)) << result.output;
  const CommandResult init =
      RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "model.init_from=/nonexistent/gpt2",
                "--set", "train.steps=1"});
  EXPECT_NE(init.exit_code, 0);
  EXPECT_NE(init.output.find("--set model.init_from=/nonexistent/gpt2: no such file or folder"),
            std::string::npos)
      << init.output;
  EXPECT_FALSE(AnyWorkerLogged(init.output)) << init.output;
  const CommandResult tokenizer =
      RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "data.tokenizer=/nonexistent/tok.json",
                "--set", "train.steps=1", "--set", "model.vocab_size=50257"});
  EXPECT_NE(tokenizer.exit_code, 0);
  EXPECT_NE(tokenizer.output.find("data.tokenizer: /nonexistent/tok.json: no such file or folder"),
            std::string::npos)
      << tokenizer.output;
  EXPECT_FALSE(AnyWorkerLogged(tokenizer.output)) << tokenizer.output;
}

// The line of the launcher's output that says why the job failed.
std::string Headline(const std::string& output) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("[launcher] [error]") != std::string::npos) return line;
  }
  return "(no headline)";
}

// Files an adversary (or an accident) hands over: each fails at once, the cause named in the
// launcher's headline, in the user's words (no source paths, no "check failed").
// Sets the manifest's entry for file `name` of `step_dir` to its size and checksum now, as someone
// crafting a file would.
void RecordInManifest(const std::string& step_dir, const std::string& name) {
  const std::string bytes = ReadFile(step_dir + "/" + name);
  nlohmann::json manifest = ReadJson(step_dir + "/manifest.json");
  Fnv1a64 hash;
  hash.Update(bytes.data(), bytes.size());
  for (nlohmann::json& entry : manifest["files"]) {
    if (entry["name"] == name) {
      entry["bytes"] = bytes.size();
      entry["fnv1a64"] = hash.hex();
    }
  }
  std::ofstream(step_dir + "/manifest.json", std::ios::trunc) << manifest.dump(2);
}

// Rewrites the safetensors header text of layer file `name` with `edit` applied (the data bytes
// kept), then sets the manifest's entry to the file's new size and checksum, as someone crafting
// a file would.
void CraftLayerHeader(const std::string& step_dir, const std::string& name,
                      const std::function<void(std::string&)>& edit) {
  const std::string path = step_dir + "/" + name;
  const std::string bytes = ReadFile(path);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  std::string text = bytes.substr(8, header_size);
  edit(text);
  const uint64_t size = text.size();
  std::string crafted(reinterpret_cast<const char*>(&size), 8);
  crafted += text + bytes.substr(8 + header_size);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << crafted;
  RecordInManifest(step_dir, name);
}

// CraftLayerFile with the header as JSON.
void CraftLayerFile(const std::string& step_dir, const std::string& name,
                    const std::function<void(nlohmann::json&)>& edit) {
  CraftLayerHeader(step_dir, name, [&](std::string& text) {
    nlohmann::json header = nlohmann::json::parse(text);
    edit(header);
    text = header.dump();
  });
}

// One training step of gpt-tiny on `stages` stages into `output_dir`: a checkpoint to craft.
void TrainOneStep(const std::string& output_dir, int stages) {
  ASSERT_EQ(
      RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "train.steps=1", "--set",
                "parallel.stages=" + std::to_string(stages), "--set", "output.dir=" + output_dir})
          .exit_code,
      0);
}

// A weight stored at another shape (same bytes, a re-checksummed manifest: the checksum cannot
// catch it) is refused by every command that reads it, naming the tensor and both shapes.
TEST(FailureTest, AWeightStoredAtAnotherShapeIsRefusedByEveryReader) {
  const std::string root = TempDir("shape");
  const std::string run = root + "/run";
  TrainOneStep(run, 1);
  const std::string step_dir = run + "/checkpoints/step-1";
  std::string transposed;
  CraftLayerFile(step_dir, "layer-1.safetensors", [&](nlohmann::json& header) {
    for (auto& [key, entry] : header.items()) {
      if (!key.ends_with("attn.c_attn.weight")) continue;
      nlohmann::json& shape = entry["shape"];
      std::swap(shape[0], shape[1]);
      transposed = shape.dump();
    }
  });
  ASSERT_EQ(transposed, "[384,128]");
  const std::vector<std::vector<std::string>> commands = {
      {"export", run, root + "/hf"},
      {"compress", run, root + "/low-rank", "--low-rank", "16"},
      {"compress", run, root + "/int8", "--int8", "--no-eval"},
      {"generate", run, "--prompt", "The", "--tokens", "2"},
      {"eval", "configs/gpt-tiny.yaml", "--resume", run, "--set", "data.eval_fraction=0.05"},
      {"run", "configs/gpt-tiny.yaml", "--resume", run, "--set", "train.steps=2", "--set",
       "parallel.stages=1", "--set", "output.dir=" + run},
  };
  for (const std::vector<std::string>& command : commands) {
    const CommandResult result = RunBaton(command);
    EXPECT_NE(result.exit_code, 0) << command.front() << "\n" << result.output;
    for (const char* text : {"c_attn.weight", "(384, 128)", "(128, 384)", "layer-1.safetensors"}) {
      EXPECT_NE(result.output.find(text), std::string::npos)
          << text << " in " << command.front() << " " << command.at(1) << ":\n"
          << result.output;
    }
  }
}

// state.json's config is informational: `baton export` takes the model from the manifest and
// reads only config.data.tokenizer, so a config edited into one `baton run` would refuse still
// exports (it failed on train.steps). A data.tokenizer of the wrong type is named by its key.
TEST(FailureTest, ExportReadsOnlyTheTokenizerOfTheStoredConfig) {
  const std::string root = TempDir("export-config");
  const std::string run = root + "/run";
  const std::string fixture = SourceDir() + "/tests/fixtures/bpe/tokenizer.json";  // 640 ids
  ASSERT_EQ(
      RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "train.steps=1", "--set",
                "parallel.stages=1", "--set", "model.vocab_size=704", "--set", "output.dir=" + run})
          .exit_code,
      0);
  const std::string step_dir = run + "/checkpoints/step-1";
  const auto set_config = [&](const nlohmann::json& config) {
    nlohmann::json state = ReadJson(step_dir + "/state.json");
    state["config"] = config;
    std::ofstream(step_dir + "/state.json", std::ios::trunc) << state.dump(2);
    RecordInManifest(step_dir, "state.json");
  };
  set_config({{"data", {{"tokenizer", fixture}}},
              {"train", {{"steps", "abc"}}},
              {"model", {{"context", 999}, {"preset", "nonsense"}}}});
  const CommandResult exported = RunBaton({"export", run, root + "/hf"});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_EQ(ReadFile(root + "/hf/tokenizer.json"), ReadFile(fixture));
  EXPECT_EQ(ReadJson(root + "/hf/tokenizer_config.json")["model_max_length"], 128);  // manifest's
  EXPECT_EQ(ReadJson(root + "/hf/config.json")["n_ctx"], 128);

  set_config({{"data", {{"tokenizer", 5}}}});
  const CommandResult typed = RunBaton({"export", run, root + "/hf-typed"});
  EXPECT_NE(typed.exit_code, 0);
  EXPECT_NE(typed.output.find(step_dir + "/state.json: config.data.tokenizer: expected a string, "
                                         "got number 5"),
            std::string::npos)
      << typed.output;
  EXPECT_EQ(typed.output.find("json.exception"), std::string::npos) << typed.output;
  const CommandResult other = RunBaton({"export", run, root + "/hf-set", "--set", "model.width=8"});
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.output.find("--set model.width=8: baton export takes only --set "
                              "data.tokenizer=PATH"),
            std::string::npos)
      << other.output;
}

// Packed held-out data made only of separators leaves no target to predict: `baton eval` fails
// naming the windows and the file, where it printed "perplexity 1.0000".
TEST(FailureTest, EvalOfPackedSeparatorsOnlyIsAnErrorNotPerplexityOne) {
  const std::string root = TempDir("eval-separators");
  const std::string run = root + "/run";
  const std::string newlines = root + "/newlines.txt";
  std::ofstream(newlines) << std::string(8192, '\n');
  ASSERT_EQ(RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "train.steps=1", "--set",
                      "parallel.stages=1", "--set", "output.dir=" + run})
                .exit_code,
            0);
  const CommandResult result =
      RunBaton({"eval", "configs/gpt-tiny.yaml", "--resume", run, "--set",
                "data.eval_path=" + newlines, "--set", "data.packing=true", "--set",
                "data.document_separator=10", "--set", "parallel.stages=2"});
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("evaluation: windows 0 to 3 of " + newlines +
                               ": all 4 x 128 tokens are data.document_separator 10"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("perplexity"), std::string::npos) << result.output;
}

TEST(FailureTest, HostileFilesFailAtOnceNamingTheFile) {
  const std::string dir = TempDir("hostile-files");
  // A FIFO as the data: opening it must not block (it would, forever, with a plain open).
  const std::string fifo = dir + "/corpus.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  CommandResult result = RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "data.path=" + fifo,
                                   "--set", "train.steps=1", "--set", "parallel.stages=2", "--set",
                                   "output.dir=" + dir + "/fifo"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find(fifo + ": is a FIFO, not a regular file"), std::string::npos)
      << result.output;
  // model.init_from weights whose safetensors header has a byte flipped to 0xff (invalid UTF-8,
  // which JSON refuses): the launcher opens the file before any worker and names it.
  const std::string weights = dir + "/weights.safetensors";
  {
    const std::string header =
        "{\"wte.weight\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    std::ofstream out(weights, std::ios::binary);
    const uint64_t length = header.size();
    out.write(reinterpret_cast<const char*>(&length), sizeof(length));  // little-endian here
    out << header << std::string(4, '\0');
  }
  result = RunBaton({"run", "configs/gpt-tiny.yaml", "--set", "model.init_from=" + weights, "--set",
                     "train.steps=1", "--set", "parallel.stages=2", "--set",
                     "output.dir=" + dir + "/out"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("baton: error: --set model.init_from: model.init_from " + weights),
            std::string::npos)
      << result.output;
  EXPECT_FALSE(AnyWorkerLogged(result.output)) << result.output;
  for (const char* internal : {"check failed", ".cc:"}) {
    EXPECT_EQ(result.output.find(internal), std::string::npos) << result.output;
  }
  // The same byte in a checkpoint's layer file (the manifest re-recorded, as a crafter would):
  // a stage reads it, and its error (invalid UTF-8, which protobuf refuses too) still reaches
  // the launcher's headline, naming the file and the stage.
  const std::string run = dir + "/run";
  TrainOneStep(run, 2);
  const std::string step_dir = run + "/checkpoints/step-1";
  CraftLayerHeader(step_dir, "layer-1.safetensors", [](std::string& header) {
    const size_t name_end = header.find(".weight\"");
    ASSERT_NE(name_end, std::string::npos) << header;
    header.insert(name_end + 7, "\xff");
  });
  result = RunBaton({"run", "configs/gpt-tiny.yaml", "--resume", run + "/checkpoints", "--set",
                     "train.steps=2", "--set", "parallel.stages=2", "--set",
                     "output.dir=" + dir + "/resumed"});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(Headline(result.output).find("layer-1.safetensors"), std::string::npos)
      << result.output;
  EXPECT_NE(Headline(result.output).find("stage"), std::string::npos) << result.output;
  for (const char* internal : {"check failed", ".cc:"}) {
    EXPECT_EQ(result.output.find(internal), std::string::npos) << result.output;
  }
}

// Connects to the first TCP address of a Gloo rank's published addresses (sockaddr_storage
// first) and sends junk; returns the socket, left open.
int StrayConnection(const std::string& published) {
  sockaddr_storage address{};
  if (published.size() < sizeof(address)) return -1;
  std::memcpy(&address, published.data(), sizeof(address));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(sockaddr_in)) != 0) {
    ::close(fd);
    return -1;
  }
  const std::string junk = "GET / HTTP/1.1\r\nHost: stray\r\n\r\n" + std::string(100, 'x');
  (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
  return fd;
}

bool WaitForFile(const std::string& path, int seconds) {
  for (int i = 0; i < seconds * 50; ++i) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Junk on the workers' Gloo ports while they rendezvous (BATON_TEST_MESH_GATE holds both ranks
// after they listen, until the junk is in): the spoiled mesh round is built again on fresh
// ports, and the job trains to exactly the parameters of an undisturbed run.
TEST(FailureTest, JunkOnTheWorkersPortsDuringTheRendezvousChangesNothing) {
  const std::string dir = TempDir("junk-ports");
  const std::string run = "'" + BatonFaultsBinary() +
                          "' run configs/gpt-tiny.yaml --set train.steps=3 --set "
                          "parallel.stages=2 --set output.final_checkpoint=false";
  const CommandResult reference =
      RunShell("cd '" + SourceDir() + "' && " + run + " --set output.dir=" + dir +
               "/reference --report " + dir + "/reference.json 2>&1");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::string gate = dir + "/gate";
  std::filesystem::create_directories(gate);
  const std::string log = dir + "/junk.log";
  Background("BATON_TEST_MESH_GATE=" + gate + " " + run + " --set output.dir=" + dir +
                 "/junk --report " + dir + "/junk.json",
             log);
  std::vector<int> strays;
  for (int rank : {0, 1}) {
    const std::string published = gate + "/published-" + std::to_string(rank);
    ASSERT_TRUE(WaitForFile(published, 120)) << ReadFile(log);
    strays.push_back(StrayConnection(ReadFile(published)));
    EXPECT_GE(strays.back(), 0) << "rank " << rank << " was not listening";
  }
  std::ofstream(gate + "/open").close();
  ASSERT_TRUE(WaitFor(log, "exit=", 300)) << ReadFile(log);
  const std::string output = ReadFile(log);
  EXPECT_NE(output.find("exit=0"), std::string::npos) << output;
  EXPECT_NE(output.find("connecting again on fresh ports"), std::string::npos) << output;
  EXPECT_EQ(ReadJson(dir + "/junk.json").at("param_checksum"),
            ReadJson(dir + "/reference.json").at("param_checksum"));
  for (int fd : strays) {
    if (fd >= 0) ::close(fd);
  }
}

}  // namespace
}  // namespace baton::testing
