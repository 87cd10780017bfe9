#include "restore/restore_recognition.h"

#include "state/checkpoint_record.h"

namespace gpuckpt {

namespace {

std::string value_of(const std::map<std::string, std::string>& annotations, const std::string& key) {
  auto it = annotations.find(key);
  return it == annotations.end() ? std::string() : it->second;
}

bool has_key_with_prefix(const std::map<std::string, std::string>& annotations, const std::string& prefix) {
  auto it = annotations.lower_bound(prefix);
  return it != annotations.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

std::string_view runtime_name(RestoringRuntime runtime) {
  return runtime == RestoringRuntime::Containerd ? "containerd" : "CRI-O";
}

bool is_containerd_restore_without_source(const std::map<std::string, std::string>& annotations) {
  return value_of(annotations, "restored") == "true" && value_of(annotations, "checkpointImage").empty() &&
         has_key_with_prefix(annotations, "io.kubernetes.cri.");
}

std::string restored_container_name(const RecognisedRestore& restore, const std::string& reported_name,
                                    const std::map<std::string, std::string>& labels) {
  // Only in place of that placeholder: a name containerd reports correctly is the container's, whatever a label says
  if (restore.runtime != RestoringRuntime::Containerd || reported_name != "containerd") return reported_name;
  const std::string labelled = value_of(labels, "io.kubernetes.container.name");
  return labelled.empty() ? reported_name : labelled;
}

std::optional<RecognisedRestore> recognise_restore(const std::map<std::string, std::string>& annotations) {
  const std::string checkpoint_id = value_of(annotations, kAnnotationCheckpointId);
  // containerd's CRI sets these three on the restored container itself (container_checkpoint_linux.go); the
  // kubelet gives a container no annotation of those names.
  const std::string source = value_of(annotations, "checkpointImage");
  if (value_of(annotations, "restored") == "true" && !source.empty() &&
      has_key_with_prefix(annotations, "io.kubernetes.cri.")) {
    RecognisedRestore restore;
    restore.runtime = RestoringRuntime::Containerd;
    restore.source = source;
    restore.source_is_archive = source.front() == '/';
    restore.checkpoint_id = checkpoint_id;
    return restore;
  }
  if (!checkpoint_id.empty() && has_key_with_prefix(annotations, "io.kubernetes.cri-o.")) {
    RecognisedRestore restore;
    restore.runtime = RestoringRuntime::CriO;
    restore.checkpoint_id = checkpoint_id;
    return restore;
  }
  return std::nullopt;
}

}  // namespace gpuckpt
