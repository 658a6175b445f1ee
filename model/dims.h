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
  // Cross-layer sharing (model.share): blocks i and j with i / share_group == j / share_group
  // hold one parameter set for their shared sublayers (model/block.h); 1 = none.
  int share_group = 1;
  bool share_attention = false;  // ln_1.*, attn.*
  bool share_mlp = false;        // ln_2.*, mlp.*
  // Low-rank factorisation (model.low_rank): the rank r of attention's c_attn and c_proj, and
  // of the MLP's c_fc and c_proj; 0 = dense.
  int low_rank_attn = 0;
  int low_rank_mlp = 0;

  int head_dim() const { return width / num_heads; }
  bool shares() const { return share_group > 1 && (share_attention || share_mlp); }
  // The first block of block i's share group (i itself without sharing).
  int share_leader(int block) const { return shares() ? block - block % share_group : block; }
  bool operator==(const ModelDims&) const = default;
};

// Throws baton::Error unless every field is positive and width is a multiple of num_heads.
void Validate(const ModelDims& dims);
std::string ToString(const ModelDims& dims);  // "V=50257 T=1024 L=12 NH=12 C=768"

}  // namespace baton
