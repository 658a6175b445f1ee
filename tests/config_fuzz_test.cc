// Fuzzing `baton plan`: the shipped configs, mutated (values at the edges of their types, wrong
// types, unknown, missing and duplicate keys, bad nesting, flipped bytes, --set overrides), run
// through exactly what the command runs (PlanCommand: LoadConfig, the plan, each stage's predicted
// memory, the tables or the JSON). Every case ends in a plan, or in a baton::Error naming the
// config file (the --set for an override's fault), and for an error in the config itself its line
// or key.
#include <sys/stat.h>

#include <cctype>
#include <sstream>

#include "config/config_schema.h"
#include "core/temp_dir.h"
#include "launcher/run.h"
#include "scheduler/generators.h"
#include "scheduler/schedule.h"
#include "tests/fuzz_util.h"

namespace baton {
namespace {

using fuzz::CaseId;
using fuzz::Mutator;

constexpr uint64_t kSeed = 0x5eed0001;

// The files a mutated config may point at: small data of each kind, a FIFO, a folder, a schedule
// CSV and a tokenizer, under one temporary folder.
struct Files {
  test_util::TempDir dir;
  std::vector<std::string> paths;
  std::string schedule;

  Files() {
    fuzz::WriteBytes(dir / "data.txt", std::string(4096, 'a') + "The quick brown fox.\n");
    fuzz::WriteBytes(dir / "data.bin", std::string(2048, '\x01'));
    fuzz::WriteBytes(dir / "odd.bin", std::string(2047, '\x01'));
    std::filesystem::create_directories(dir / "folder/inner");
    fuzz::WriteBytes(dir / "folder/inner/a.txt", std::string(3000, 'b'));
    std::filesystem::create_directories(dir / "empty");
    ::mkfifo((dir / "fifo").c_str(), 0600);
    schedule = dir / "schedule.csv";
    SaveScheduleCsv(MakeSchedule("1f1b", 4, 4, 1), schedule);
    paths = {dir / "data.txt",
             dir / "data.bin",
             dir / "odd.bin",
             dir / "folder",
             dir / "empty",
             dir / "fifo",
             dir / "missing",
             schedule,
             std::string(BATON_SOURCE_DIR) + "/tests/fixtures/bpe/tokenizer.json",
             std::string(BATON_SOURCE_DIR) + "/tests/fixtures/bpe",
             "/dev/null",
             "/dev/zero",
             "",
             std::string(5000, 'p')};
  }
};

// Values of every type, odd and valid, for any key.
std::string RandomValue(Mutator& m, const Files& files) {
  // clang-format off
  static const std::vector<std::string> odd = {
      "nan", ".nan", ".inf", "-.inf", "inf", "1e", "0x10", "1_000", "[1, 2]", "{a: 1}", "''",
      "\"\"", "~", "null", "true", "yes", "[]", "{}", "every:0", "every:-1", "every:1", "every:2",
      "every:4294967297", "selective", "none", "\"\\xff\"", "!!binary aGVsbG8=", "&a 5", "*a",
      "|\n  text", "[embedding, head]", "[embedding, block, block, head]",
      "[embedding, mlp_block, head]", "[head, embedding]", "[embedding, [block], head]"};
  static const std::vector<std::string> names = {
      "gpt", "mlp", "custom", "text", "bin", "auto", "cosine", "constant", "gpipe", "1f1b",
      "interleaved", "zb-h1", "uniform", "parameters", "flops", "fp32", "bf16", "fp16", "cpu",
      "cuda", "false"};
  // clang-format on
  switch (m.Below(10)) {
    case 0:
    case 1:
    case 2:
    case 3:
      return m.Pick(fuzz::BoundaryNumbers());
    case 4:
    case 5:
      return m.Pick(odd);
    case 6:
      return m.Pick(names);
    case 7:
      return "\"" + m.Pick(files.paths) + "\"";
    case 8:
      return m.Pick(std::vector<std::string>{"3", "8", "16", "32", "64", "0.01", "1e-3", "0.9"});
    default: {
      // Deep nesting, a huge string, or bytes that are not UTF-8.
      const size_t n = 1 + m.Below(3);
      if (n == 1) return std::string(3000, '[') + std::string(3000, ']');
      if (n == 2) return std::string(100000, 'x');
      return "\"a" + m.Junk(4) + "\"";
    }
  }
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

// Sets `section`.`key` to `value`: replaces the line if the key is written, else adds it to its
// section (or a new section at the end).
void SetKey(std::vector<std::string>& lines, const std::string& section, const std::string& key,
            const std::string& value) {
  const std::string written = "  " + key + ":";
  bool in_section = false;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].empty() && lines[i][0] != ' ' && lines[i][0] != '#') {
      in_section = lines[i] == section + ":";
      if (in_section) {
        size_t end = i + 1;
        while (end < lines.size() && (lines[end].empty() || lines[end][0] == ' ')) ++end;
        for (size_t k = i + 1; k < end; ++k) {
          if (lines[k].rfind(written, 0) == 0) {
            lines[k] = written + " " + value;
            return;
          }
        }
        lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i) + 1, written + " " + value);
        return;
      }
    }
  }
  lines.push_back(section + ":");
  lines.push_back(written + " " + value);
}

// One change to the config's lines.
void MutateLines(Mutator& m, const Files& files, std::vector<std::string>& lines) {
  const auto schema = config_internal::SchemaKeys();
  const auto& [section, keys] = schema[m.Below(schema.size())];
  const std::string key = keys[m.Below(keys.size())];
  const size_t at = lines.empty() ? 0 : m.Below(lines.size());
  switch (m.Below(12)) {
    case 0:
    case 1:
    case 2:
    case 3:  // a known key set to any value
      SetKey(lines, section, key, RandomValue(m, files));
      return;
    case 4:  // any line's value replaced
      if (!lines.empty() && lines[at].find(':') != std::string::npos) {
        lines[at] = lines[at].substr(0, lines[at].find(':') + 1) + " " + RandomValue(m, files);
      }
      return;
    case 5:
      if (!lines.empty()) lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(at));
      return;
    case 6:  // a duplicate key or section
      if (!lines.empty()) lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at), lines[at]);
      return;
    case 7:  // an unknown key, section or misspelling
      lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at),
                   m.Pick(std::vector<std::string>{"  stepz: 5", "bogus: 1", "  " + key + "s: 1",
                                                   "model.width: 8", "  : 3", "? [a]\n: 1",
                                                   "\t" + key + ": 1"}));
      return;
    case 8:  // bad nesting: indentation changed, a section turned into a list or a scalar
      if (!lines.empty()) {
        const std::string body =
            lines[at].substr(lines[at].find_first_not_of(' ') == std::string::npos
                                 ? 0
                                 : lines[at].find_first_not_of(' '));
        lines[at] = m.Pick(std::vector<std::string>{"", " ", "    ", "      ", "- "}) + body;
      }
      return;
    case 9:
      lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at),
                   m.Pick(std::vector<std::string>{section + ": 5", section + ": [1, 2]",
                                                   "    deeper: {a: [1, {b: 2}]}", "---", "- item",
                                                   "...", "%YAML 1.2", "&anchor x: 1"}));
      return;
    case 10:  // a valid schedule file, or a mutated one
      if (m.Chance(0.5)) {
        SetKey(lines, "parallel", "schedule_file", "\"" + files.schedule + "\"");
      } else {
        std::string csv = fuzz::ReadBytes(files.schedule);
        for (size_t i = 0, n = 1 + m.Below(4); i < n; ++i) m.MutateBytes(csv);
        const std::string path =
            files.dir / ("schedule-" + std::to_string(m.Below(1 << 30)) + ".csv");
        fuzz::WriteBytes(path, csv);
        SetKey(lines, "parallel", "schedule_file", "\"" + path + "\"");
      }
      return;
    default:  // a second document
      lines.push_back("---");
      lines.push_back("model:\n  width: 64");
      return;
  }
}

// --set overrides, well-formed or not.
std::vector<std::string> RandomOverrides(Mutator& m, const Files& files) {
  const auto schema = config_internal::SchemaKeys();
  std::vector<std::string> overrides;
  for (size_t i = 0, n = 1 + m.Below(3); i < n; ++i) {
    const auto& [section, keys] = schema[m.Below(schema.size())];
    const std::string key = keys[m.Below(keys.size())];
    overrides.push_back(m.Pick(std::vector<std::string>{
        section + "." + key + "=" + RandomValue(m, files), section + "." + key + "=",
        section + ".=5", "." + key + "=5", section + "." + key, "=", section + ".nokey=1",
        "nosection." + key + "=1", section + "." + key + "=[", section + "." + key + "=\xff\xfe"}));
  }
  return overrides;
}

// True when `message`, an error about the config at `path` itself, says where: "path:LINE: ..." or
// "path: section.key: ...". A config that loads but cannot be planned ("path: plan: ...") has no
// one line to blame.
bool NamesLineOrKey(const std::string& message, const std::string& path) {
  if (message.rfind(path, 0) != 0) return true;  // not a config error: named the file, enough
  const std::string_view rest = std::string_view(message).substr(path.size());
  if (rest.size() > 1 && rest[0] == ':' && std::isdigit(static_cast<unsigned char>(rest[1]))) {
    return true;  // path:LINE
  }
  if (rest.starts_with(": plan: ")) return true;
  for (const auto& [section, keys] : config_internal::SchemaKeys()) {
    const std::string key = ": " + section;
    if (rest.starts_with(key) && rest.size() > key.size() &&
        std::string_view(".:[").find(rest[key.size()]) != std::string_view::npos) {
      return true;  // path: section.key
    }
  }
  return false;
}

TEST(ConfigFuzzTest, MutatedConfigsPlanOrFailNamingTheFileAndTheLineOrKey) {
  Files files;
  std::vector<std::string> bases;
  for (const char* name : {"gpt-tiny", "mlp-tiny", "gpt-small-cpu"}) {
    std::string text =
        fuzz::ReadBytes(std::string(BATON_SOURCE_DIR) + "/configs/" + name + ".yaml");
    ASSERT_FALSE(text.empty()) << name;
    bases.push_back(text);
  }
  fuzz::AddressSpaceCap cap(fuzz::kAddressSpaceCap);
  const fuzz::QuietLog quiet;
  int planned = 0, refused = 0;
  for (const int index : fuzz::Cases()) {
    const CaseId id{"config", kSeed, index};
    Mutator m(fuzz::CaseSeed(kSeed, index));
    std::vector<std::string> lines = Lines(m.Pick(bases));
    for (size_t i = 0, n = m.Below(4); i < n; ++i) MutateLines(m, files, lines);
    std::string text = Join(lines);
    if (m.Chance(0.15)) {
      for (size_t i = 0, n = 1 + m.Below(4); i < n; ++i) m.MutateBytes(text);
    }
    PlanOptions options;
    options.config.path = files.dir / ("config-" + std::to_string(index) + ".yaml");
    if (m.Chance(0.15)) options.config.overrides = RandomOverrides(m, files);
    options.format = m.Chance(0.5) ? "text" : "json";
    if (m.Chance(0.2)) options.memory.budget = m.Chance(0.5) ? "64GiB" : "16MiB";
    fuzz::WriteBytes(options.config.path, text);

    const fuzz::Outcome outcome = fuzz::RunCase(id, [&] {
      std::ostringstream out;
      PlanCommand(options, out);
      EXPECT_FALSE(out.str().empty()) << id.ToString();
    });
    std::filesystem::remove(options.config.path);
    if (outcome.ok) {
      ++planned;
      continue;
    }
    ++refused;
    const std::string& message = outcome.error;
    const bool override_fault = message.find("--set ") != std::string::npos;
    if (override_fault) {
      EXPECT_FALSE(options.config.overrides.empty()) << id.ToString() << ": " << message;
      fuzz::ExpectErrorNames(id, message, "--set ", "the --set");
      continue;
    }
    fuzz::ExpectErrorNames(id, message, options.config.path, "the config file");
    EXPECT_TRUE(NamesLineOrKey(message, options.config.path))
        << id.ToString() << ": a config error without its line or key: " << message;
  }
  std::printf("config fuzz: %d planned, %d refused\n", planned, refused);
  // Mutations must leave enough configs valid for the planner itself to be exercised.
  if (fuzz::Cases().size() >= 100) {
    EXPECT_GE(planned, 10);
  }
}

}  // namespace
}  // namespace baton
