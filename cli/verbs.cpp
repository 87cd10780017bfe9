// The verb table. Adding a verb: a verb_NAME.cpp with `int run_NAME(std::span<char*>)`, one line here.
#include "cli/verbs.h"

namespace gpuckpt::cli {

int run_version(std::span<char*> args);
int run_gpus(std::span<char*> args);
int run_match(std::span<char*> args);
int run_checkpoint(std::span<char*> args);
int run_restore(std::span<char*> args);
int run_inspect(std::span<char*> args);
int run_doctor(std::span<char*> args);
int run_image(std::span<char*> args);
int run_transfer(std::span<char*> args);
int run_runtime(std::span<char*> args);
int run_target_pod(std::span<char*> args);
int run_jobs(std::span<char*> args);
int run_store(std::span<char*> args);
int run_export(std::span<char*> args);
int run_import(std::span<char*> args);
int run_pull_chunks(std::span<char*> args);
int run_job(std::span<char*> args);

std::span<const Verb> verbs() {
  static const Verb table[] = {
      {"version", "print gpuckpt's version", run_version},
      {"gpus", "list this node's GPUs (--json: the GPU properties record)", run_gpus},
      {"match", "choose this node's GPUs for a checkpoint's GPU record (exit 3: none fit)", run_match},
      {"checkpoint", "checkpoint a running container into a GPU-annotated archive (agent or local runtime)", run_checkpoint},
      {"restore", "restore a checkpoint archive onto this node's matching GPUs (agent or local runtime)", run_restore},
      {"inspect", "show what a checkpoint archive holds and whether this node can take it (exit 3: no)", run_inspect},
      {"image", "turn a checkpoint archive into a checkpoint image in the node's image store (agent or local podman)", run_image},
      {"transfer", "have an agent push a checkpoint archive straight to another node's agent (resumable, checksummed)", run_transfer},
      {"runtime", "the container runtime behind an agent, and whether restores there are pods", run_runtime},
      {"target-pod", "the pod that restores a source pod's container from its checkpoint image on a node (JSON in, JSON out)", run_target_pod},
      {"jobs", "list an agent's checkpoint, restore and image jobs, newest first", run_jobs},
      {"job", "show one job of an agent; --follow: until it ends (exit 1: it failed)", run_job},
      {"store", "the chunk store of store-backed checkpoints: gc (dry run unless --delete), refs, unref", run_store},
      {"export", "make a store-backed checkpoint archive self-contained: it carries the chunks it needs", run_export},
      {"import", "put the chunks an exported archive carries into a chunk store; leave it store-backed", run_import},
      {"pull-chunks", "pull a store-backed checkpoint image's chunks from its registry into a chunk store", run_pull_chunks},
      {"doctor", "check whether GPU checkpoints work on this node: pass/warn/fail with the fix (exit 1: a failure)", run_doctor},
  };
  return table;
}

}  // namespace gpuckpt::cli
