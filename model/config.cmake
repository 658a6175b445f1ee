# Typed config (model/config*.{h,cc}): YAML -> validated structs, overrides, YAML/JSON dumps.
add_library(baton_config STATIC
  ${CMAKE_CURRENT_LIST_DIR}/config.cc
  ${CMAKE_CURRENT_LIST_DIR}/config_schema.cc
  ${CMAKE_CURRENT_LIST_DIR}/config_validate.cc
  ${CMAKE_CURRENT_LIST_DIR}/layer_kind.cc)
target_link_libraries(baton_config PUBLIC baton_core nlohmann_json::nlohmann_json PRIVATE yaml-cpp)

# The config in its protobuf form, for the job plan (config_proto.h).
add_library(baton_config_proto STATIC ${CMAKE_CURRENT_LIST_DIR}/config_proto.cc)
target_link_libraries(baton_config_proto PUBLIC baton_config baton_proto)

baton_add_test(config_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/config_test.cc ${CMAKE_CURRENT_LIST_DIR}/config_proto_test.cc
  LIBS baton_config baton_config_proto)
# Tests load the shipped configs (configs/*.yaml) from the source tree.
target_compile_definitions(config_test PRIVATE BATON_SOURCE_DIR="${CMAKE_SOURCE_DIR}")

# The model a config describes (dims and graph): config meets the layer graph.
add_library(baton_model_config STATIC from_config.cc)
target_link_libraries(baton_model_config PUBLIC baton_model baton_config)
