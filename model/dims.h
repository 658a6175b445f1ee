// The shape of a GPT-style model: what every layer and the cost model are built from.
#pragma once

#include <string>

namespace baton {

struct ModelDims {
  int vocab_size = 0;  // V
  int context = 0;     // maxT: rows of the position embedding; a micro-batch's T <= context
  int num_layers = 0;  // L: blocks (block or mlp_block) in the graph
  int num_heads = 0;   // NH; head size D = width / num_heads
  int width = 0;       // C

  int head_dim() const { return width / num_heads; }
  bool operator==(const ModelDims&) const = default;
};

// Throws baton::Error unless every field is positive and width is a multiple of num_heads.
void Validate(const ModelDims& dims);
std::string ToString(const ModelDims& dims);  // "V=50257 T=1024 L=12 NH=12 C=768"

}  // namespace baton
