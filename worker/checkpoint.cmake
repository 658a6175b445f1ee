# Training checkpoints and safetensors (worker/checkpoint*.{h,cc}, worker/safetensors*.{h,cc}):
# per-layer checkpoint files with a manifest, resume, GPT-2 weights in and out.
add_library(baton_checkpoint STATIC
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_export.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_manifest.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_reader.cc
  ${CMAKE_CURRENT_LIST_DIR}/checkpoint_writer.cc
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cc
  ${CMAKE_CURRENT_LIST_DIR}/safetensors_gpt2.cc)
target_link_libraries(baton_checkpoint
  PUBLIC baton_stage baton_model baton_core nlohmann_json::nlohmann_json)

baton_add_test(checkpoint_test
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/checkpoint_manifest_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/checkpoint_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/safetensors_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/safetensors_gpt2_test.cc
  LIBS baton_checkpoint)
