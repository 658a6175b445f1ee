// Whose output.dir it is: a fresh `baton run` does not write into a folder that holds another
// run's outputs (its checkpoints would stay beside the new run's, `latest` and metrics.jsonl would
// mix the two). docs/outputs.md, "One run per folder".
#pragma once

#include <string>
#include <vector>

namespace baton {

// The outputs of a run that `dir` holds, as names relative to it in a fixed order:
// "checkpoints/" when that folder has any entry; whichever of metrics.jsonl, report.json,
// report.html, trace.json, timeline.svg and timeline_simulated.svg are there as regular files (a
// link planted at such a name is not a run's: the run replaces it, core/files.h); "tensorboard/"
// when that folder holds events.out.tfevents.* files. Empty when dir does not exist or holds none
// of them (files of other programs do not count).
std::vector<std::string> RunOutputsIn(const std::string& dir);

// Before a fresh run (no --resume) writes into `dir`: an error naming what is there and the three
// ways on (--resume auto, --overwrite, another output.dir) when it holds a run's outputs; with
// `overwrite`, those outputs are removed instead (each logged; checkpoints/ is emptied, not
// removed, since it may be a link to another disk; of tensorboard/ only the event files go;
// other files stay).
void ClaimOutputDir(const std::string& dir, bool overwrite);

}  // namespace baton
