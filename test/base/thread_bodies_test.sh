#!/usr/bin/env bash
# Every place the agent, gpuckpt-nri, the CLI and their libraries (agent/ node/ nri-plugin/ cli/, rooms) start a
# thread, each one reviewed: its body catches what it throws, because an exception leaving a std::thread is
# std::terminate for the whole process and every job it runs. A thread start that is not in the list below (a new
# one, or one whose line changed) fails this test: run its body inside caught() (base/caught.h), or make sure it
# catches otherwise, and add its line here with how it catches.
set -euo pipefail
src=${GPUCKPT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$src"

# file | the line that starts the thread (trimmed) | how its body catches
reviewed=$(cat <<'LIST'
agent/http_server.cpp|std::thread([this] {   // lives as long as the process|caught() around watch()
agent/http_server.cpp|std::thread([this] { work(); }).detach();|work() catches around each connection's task
agent/pod_events.cpp|worker_([this] { run(); }) {}|run() posts each event inside caught(); the rest is queue handling
agent/main.cpp|loops.emplace_back(sweep_plans_loop, std::cref(context));|plan sweep: each pass inside caught()
agent/main.cpp|if (!context.config.kubelet_checkpoint_dir.empty()) loops.emplace_back(kubelet_watch_loop, std::cref(context));|kubelet watcher: each scan inside try/catch
agent/main.cpp|loops.emplace_back(storage_loop, std::cref(context));|storage upkeep: each pass inside try/catch
agent/main.cpp|if (context.config.node_labels.enabled) loops.emplace_back(node_labels_loop, std::cref(context));|node labels: each pass inside caught()
agent/main.cpp|std::thread signal_thread([&] {|sigwait, one log line, server.stop(): nothing that throws
node/bounded_request.cpp|std::thread guard([&] {|waits on a condition variable and stops the client: nothing that throws
node/job_scheduler.cpp|std::thread([this, job_id, pod = std::move(pod), accepted, deadline, ticket, work = std::move(work), lane] {|run_work: the job's work inside try/catch: fail_unexpectedly
node/registry_chunks.cpp|for (auto& client : clients) threads.emplace_back([&run, &client] { run(*client); });|run() is inside caught()
node/chunk_transfer.cpp|for (unsigned i = 1; i < report.streams; ++i) threads.emplace_back(caught_stream);|caught_stream: the stream inside caught()
cli/output_tee.cpp|pump_ = std::thread([this] {|read, write and a bounded append: nothing that throws
archive/archive_pipe.h|: pipe_(pipe), thread_([work = std::move(work)] {|the work inside caught()
LIST
)

found=$(grep -rnE 'std::thread[ (]|emplace_back\(|\b(worker_|thread_|pump_)(\(| = std::thread)' \
          --include='*.cpp' --include='*.h' agent node nri-plugin cli base gpu state gpumem criu restore archive runtime |
        grep -E 'thread|loops|worker_|pump_' | grep -vE 'std::thread [a-z_]+;|this_thread|std::thread>|env\.emplace_back' |
        sed -E 's/^([^:]+):[0-9]+:[[:space:]]*/\1|/; s/[[:space:]]+$//' | sort)
expected=$(printf '%s\n' "$reviewed" | cut -d'|' -f1,2 | sort)

if [ "$found" != "$expected" ]; then
  echo "thread starts differ from the reviewed list in $0:" >&2
  diff <(printf '%s\n' "$expected") <(printf '%s\n' "$found") | sed 's/^</  reviewed, not found:/; s/^>/  found, not reviewed:/' >&2 || true
  echo "Run a new thread's body inside caught() (base/caught.h) and add its line to the list, saying how it catches." >&2
  exit 1
fi
echo "$(printf '%s\n' "$found" | wc -l) thread starts, each reviewed"
