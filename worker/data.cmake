# Training data (worker/data*.{h,cc}): token datasets, text -> .bin, deterministic batch sampling.
add_library(baton_data STATIC ${CMAKE_CURRENT_LIST_DIR}/data.cc)
target_link_libraries(baton_data PUBLIC baton_core)

baton_add_test(data_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/data_test.cc
  LIBS baton_data)
