#include "config/config_proto.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "config/config_schema.h"
#include "core/error.h"

namespace baton {

using namespace config_internal;
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Walks a Config and its RunConfig message side by side; `Transfer` moves one value either way.
class ProtoVisitor : public FieldVisitor {
 public:
  explicit ProtoVisitor(Message* root) : root_(root) {}

  void BeginSection(std::string_view section) override {
    section_name_ = section;
    const FieldDescriptor* field = root_->GetDescriptor()->FindFieldByName(std::string(section));
    BATON_CHECK(field != nullptr && field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE,
                "pb.RunConfig has no section {}", section);
    section_ = root_->GetReflection()->MutableMessage(root_, field);
  }

 protected:
  // The field `key` of the current section, checked to be of `type` (and repeated or not).
  const FieldDescriptor* Field(std::string_view key, FieldDescriptor::CppType type,
                               bool repeated = false) const {
    const FieldDescriptor* field = section_->GetDescriptor()->FindFieldByName(ProtoFieldName(key));
    BATON_CHECK(field != nullptr && field->cpp_type() == type && field->is_repeated() == repeated,
                "pb.RunConfig has no {} field {}.{}", field == nullptr ? "" : "matching",
                section_name_, key);
    return field;
  }
  std::string Dotted(std::string_view key) const {
    return fmt::format("{}.{}", section_name_, key);
  }

  Message* root_;
  Message* section_ = nullptr;
  std::string section_name_;
};

class Writer final : public ProtoVisitor {
 public:
  using ProtoVisitor::ProtoVisitor;
  void VisitInt(std::string_view key, int64_t& value, const IntRule&) override {
    section_->GetReflection()->SetInt64(section_, Field(key, FieldDescriptor::CPPTYPE_INT64),
                                        value);
  }
  void VisitFloat(std::string_view key, double& value, const FloatRule&) override {
    section_->GetReflection()->SetDouble(section_, Field(key, FieldDescriptor::CPPTYPE_DOUBLE),
                                         value);
  }
  void VisitString(std::string_view key, std::string& value) override {
    section_->GetReflection()->SetString(section_, Field(key, FieldDescriptor::CPPTYPE_STRING),
                                         value);
  }
  void VisitChoice(std::string_view key, int& index,
                   std::span<const std::string_view> names) override {
    BATON_CHECK(index >= 0, "{}: the value has no name", Dotted(key));
    section_->GetReflection()->SetString(section_, Field(key, FieldDescriptor::CPPTYPE_STRING),
                                         std::string(names[static_cast<size_t>(index)]));
  }
  void VisitCheckpoint(std::string_view key, CheckpointPolicy& value) override {
    section_->GetReflection()->SetString(section_, Field(key, FieldDescriptor::CPPTYPE_STRING),
                                         value.ToString());
  }
  void VisitLayers(std::string_view key, std::vector<LayerKind>& value) override {
    const FieldDescriptor* field = Field(key, FieldDescriptor::CPPTYPE_STRING, /*repeated=*/true);
    for (LayerKind kind : value) {
      section_->GetReflection()->AddString(section_, field, std::string(Name(kind)));
    }
  }
};

class Reader final : public ProtoVisitor {
 public:
  using ProtoVisitor::ProtoVisitor;
  void VisitInt(std::string_view key, int64_t& value, const IntRule& rule) override {
    value =
        section_->GetReflection()->GetInt64(*section_, Field(key, FieldDescriptor::CPPTYPE_INT64));
    BATON_CHECK(rule.Allows(value), "{}: {} is not {}", Dotted(key), value, rule.Describe());
  }
  void VisitFloat(std::string_view key, double& value, const FloatRule& rule) override {
    value = section_->GetReflection()->GetDouble(*section_,
                                                 Field(key, FieldDescriptor::CPPTYPE_DOUBLE));
    BATON_CHECK(rule.Allows(value), "{}: {} is not {}", Dotted(key), value, rule.Describe());
  }
  void VisitString(std::string_view key, std::string& value) override {
    value = section_->GetReflection()->GetString(*section_,
                                                 Field(key, FieldDescriptor::CPPTYPE_STRING));
  }
  void VisitChoice(std::string_view key, int& index,
                   std::span<const std::string_view> names) override {
    const std::string name = section_->GetReflection()->GetString(
        *section_, Field(key, FieldDescriptor::CPPTYPE_STRING));
    index = -1;
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) index = static_cast<int>(i);
    }
    BATON_CHECK(index >= 0, "{}: '{}' is none of the choices", Dotted(key), name);
  }
  void VisitCheckpoint(std::string_view key, CheckpointPolicy& value) override {
    value = ParseCheckpointPolicy(section_->GetReflection()->GetString(
        *section_, Field(key, FieldDescriptor::CPPTYPE_STRING)));
  }
  void VisitLayers(std::string_view key, std::vector<LayerKind>& value) override {
    const FieldDescriptor* field = Field(key, FieldDescriptor::CPPTYPE_STRING, /*repeated=*/true);
    const int n = section_->GetReflection()->FieldSize(*section_, field);
    value.clear();
    for (int i = 0; i < n; ++i) {
      value.push_back(
          ParseLayerKind(section_->GetReflection()->GetRepeatedString(*section_, field, i)));
    }
  }
};

}  // namespace

void ToProto(const Config& config, pb::RunConfig* out) {
  out->Clear();
  Config copy = config;  // the visitor walks mutable fields; the writer only reads them
  Writer writer(out);
  VisitConfig(copy, writer);
}

Config FromProto(const pb::RunConfig& message) {
  Config config;
  pb::RunConfig copy = message;  // sections are reached through MutableMessage; read only
  Reader reader(&copy);
  VisitConfig(config, reader);
  Validate(config);
  return config;
}

std::string ProtoFieldName(std::string_view key) {
  std::string name(key);
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

}  // namespace baton
