#include "gpu/matcher.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
#include <cstdlib>
#include <map>
#include <set>

#include "base/log.h"

namespace gpuckpt {

namespace {

// KFD properties that describe the silicon itself: two GPUs that differ in any of them are different models,
// whatever their PCI ids say (what CRIU's amdgpu plugin compares before it accepts a restore target; links are
// checked separately, so io_links_count is not here).
constexpr const char* kAmdShapeProperties[] = {
    "simd_count",          "mem_banks_count",    "max_waves_per_simd",    "lds_size_in_kb",
    "wave_front_size",     "array_count",        "simd_arrays_per_engine", "cu_per_simd_array",
    "simd_per_cu",         "max_slots_scratch_cu", "num_sdma_engines",    "num_sdma_xgmi_engines",
    "num_sdma_queues_per_engine", "num_cp_queues", "vram_public",          "capability",
    "gfx_target_version",
};
// Resources the target must have at least as many of.
constexpr const char* kAmdAtLeastProperties[] = {"num_gws", "caches_count"};

// Firmware versions KFD reports as numbers; a restore target must be at least as new.
constexpr const char* kAmdFirmwareProperties[] = {"fw_version", "sdma_fw_version"};

bool env_flag(const char* name, bool fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  const std::string v(value);
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  log::warn(std::string("ignoring ") + name + "=" + v + ": expected 0 or 1");
  return fallback;
}

bool all_hex(std::string_view s) {
  return !s.empty() && s.size() <= 16 &&
         std::all_of(s.begin(), s.end(), [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)); });
}

std::vector<std::string_view> split_version(std::string_view v) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= v.size(); ++i) {
    if (i == v.size() || v[i] == '.' || v[i] == '-' || v[i] == '_') {
      parts.push_back(v.substr(start, i - start));
      start = i + 1;
    }
  }
  return parts;
}

}  // namespace

// Compares dotted version strings ("580.159.04", VBIOS "96.00.a5.00.1a") part by part: hex-digit parts as
// numbers (decimal-only parts order the same way read as hex), anything else as text. <0, 0, >0.
std::string describe(const MatchFailure& failure) {
  std::string text = failure.summary;
  for (const auto& r : failure.rejections)
    text += "; " + r.source_id + " -> " + r.candidate_id + ": " + r.property + " (" + r.detail + ")";
  return text;
}

int compare_versions(std::string_view a, std::string_view b) {
  const auto pa = split_version(a);
  const auto pb = split_version(b);
  for (std::size_t i = 0; i < std::max(pa.size(), pb.size()); ++i) {
    const std::string_view x = i < pa.size() ? pa[i] : std::string_view("0");
    const std::string_view y = i < pb.size() ? pb[i] : std::string_view("0");
    if (all_hex(x) && all_hex(y)) {
      const auto nx = std::stoull(std::string(x), nullptr, 16);
      const auto ny = std::stoull(std::string(y), nullptr, 16);
      if (nx != ny) return nx < ny ? -1 : 1;
    } else if (x != y) {
      return x < y ? -1 : 1;
    }
  }
  return 0;
}

MatchPolicy MatchPolicy::from_env() { return from_env(MatchPolicy{}); }

MatchPolicy MatchPolicy::from_env(MatchPolicy base) {
  base.check_model = env_flag("GPUCKPT_MODEL_CHECK", base.check_model);
  base.check_memory = env_flag("GPUCKPT_MEMORY_CHECK", base.check_memory);
  base.check_firmware = env_flag("GPUCKPT_FIRMWARE_CHECK", base.check_firmware);
  base.check_links = env_flag("GPUCKPT_LINK_CHECK", base.check_links);
  base.check_numa = env_flag("GPUCKPT_NUMA_CHECK", base.check_numa);
  base.log_params();
  return base;
}

void MatchPolicy::log_params() const {
  log::param("GPUCKPT_MODEL_CHECK", check_model ? "1" : "0");
  log::param("GPUCKPT_MEMORY_CHECK", check_memory ? "1" : "0");
  log::param("GPUCKPT_FIRMWARE_CHECK", check_firmware ? "1" : "0");
  log::param("GPUCKPT_LINK_CHECK", check_links ? "1" : "0");
  log::param("GPUCKPT_NUMA_CHECK", check_numa ? "1" : "0");
}

namespace {

struct Problem {
  std::string property;  // "vendor", "model", "memory", "firmware"
  std::string detail;
};

// Pairwise checks: everything that can be decided looking at one source GPU and one candidate.
std::vector<Problem> pair_problems(const GpuDevice& src, const GpuDevice& dst) {
  std::vector<Problem> problems;
  if (src.vendor != dst.vendor) {
    problems.push_back({"vendor", std::string("target is ") + to_string(dst.vendor) + ", source was " +
                                      to_string(src.vendor)});
    return problems;  // nothing else is comparable across vendors
  }
  // model
  if (src.vendor_id && dst.vendor_id && src.device_id && dst.device_id &&
      (src.vendor_id != dst.vendor_id || src.device_id != dst.device_id)) {
    char ids[64];
    std::snprintf(ids, sizeof ids, "%04x:%04x) is not the source's ", dst.vendor_id, dst.device_id);
    char src_ids[32];
    std::snprintf(src_ids, sizeof src_ids, "%04x:%04x)", src.vendor_id, src.device_id);
    problems.push_back({"model", "target " + dst.name + " (" + ids + src.name + " (" + src_ids});
  } else if (src.vendor == GpuVendor::Nvidia) {
    if (!src.name.empty() && !dst.name.empty() && src.name != dst.name)
      problems.push_back({"model", "target is '" + dst.name + "', source was '" + src.name + "'"});
    else if (!src.compute_capability.empty() && !dst.compute_capability.empty() &&
             src.compute_capability != dst.compute_capability)
      problems.push_back({"model", "target compute capability " + dst.compute_capability + ", source " +
                                       src.compute_capability});
    else if (!src.mig_mode.empty() && !dst.mig_mode.empty() && src.mig_mode != dst.mig_mode)
      problems.push_back({"model", "target MIG mode " + dst.mig_mode + ", source " + src.mig_mode});
  } else if (src.vendor == GpuVendor::Amd) {
    for (const char* name : kAmdShapeProperties) {
      auto a = src.properties.find(name);
      auto b = dst.properties.find(name);
      if (a != src.properties.end() && b != dst.properties.end() && a->second != b->second) {
        problems.push_back({"model", std::string(name) + " is " + std::to_string(b->second) + " on the target, " +
                                         std::to_string(a->second) + " on the source"});
        break;
      }
    }
    for (const char* name : kAmdAtLeastProperties) {
      auto a = src.properties.find(name);
      auto b = dst.properties.find(name);
      if (a != src.properties.end() && b != dst.properties.end() && b->second < a->second) {
        problems.push_back({"model", std::string(name) + " is " + std::to_string(b->second) + " on the target, " +
                                         std::to_string(a->second) + " on the source"});
        break;
      }
    }
  }
  // memory
  if (dst.memory_bytes != 0 && src.memory_bytes > dst.memory_bytes)   // 0 = the target could not say
    problems.push_back({"memory", "target has " + format_bytes(dst.memory_bytes) + ", source GPU had " +
                                      format_bytes(src.memory_bytes)});
  // firmware / driver: every older one is named
  std::string fw;
  auto older = [&](const std::string& what) { fw += (fw.empty() ? "" : "; ") + what; };
  if (!src.firmware_version.empty() && !dst.firmware_version.empty() &&
      compare_versions(dst.firmware_version, src.firmware_version) < 0)
    older("target firmware " + dst.firmware_version + " is older than the source's " + src.firmware_version);
  if (!src.driver_version.empty() && !dst.driver_version.empty() &&
      compare_versions(dst.driver_version, src.driver_version) < 0)
    older("target driver " + dst.driver_version + " is older than the source's " + src.driver_version);
  if (src.vendor == GpuVendor::Amd) {
    for (const char* name : kAmdFirmwareProperties) {
      auto a = src.properties.find(name);
      auto b = dst.properties.find(name);
      if (a != src.properties.end() && b != dst.properties.end() && b->second < a->second)
        older(std::string("target ") + name + " " + std::to_string(b->second) + " is older than the source's " +
              std::to_string(a->second));
    }
  }
  if (!fw.empty()) problems.push_back({"firmware", fw});
  return problems;
}

bool relaxed(const MatchPolicy& policy, const std::string& property) {
  if (property == "model") return !policy.check_model;
  if (property == "memory") return !policy.check_memory;
  if (property == "firmware") return !policy.check_firmware;
  return false;  // a GPU of another vendor can never take over a process's state
}

const char* env_name(const std::string& property) {
  if (property == "model") return "GPUCKPT_MODEL_CHECK";
  if (property == "memory") return "GPUCKPT_MEMORY_CHECK";
  if (property == "firmware") return "GPUCKPT_FIRMWARE_CHECK";
  if (property == "links") return "GPUCKPT_LINK_CHECK";
  return "?";
}

// Two source GPUs that were linked (XGMI, NVLink) or in one XGMI hive: their targets must be linked alike.
struct LinkRequirement {
  std::size_t a = 0, b = 0;   // indexes into the source list
  std::string type;           // "xgmi", "nvlink", or "hive"
  bool bidirectional = true;
  std::uint32_t count = 1;
  std::string text;           // for messages
};

const GpuLink* find_link(const GpuDevice& from, const std::string& to_id, const std::string& type) {
  const GpuLink* best = nullptr;
  for (const auto& link : from.links) {
    if (link.peer_id != to_id || link.type != type) continue;
    if (!best || (link.bidirectional && !best->bidirectional) ||
        (link.bidirectional == best->bidirectional && link.count > best->count))
      best = &link;
  }
  return best;
}

bool satisfies(const LinkRequirement& req, const GpuDevice& ta, const GpuDevice& tb) {
  if (req.type == "hive") return ta.hive_id != 0 && ta.hive_id == tb.hive_id;
  const GpuLink* link = find_link(ta, tb.id, req.type);
  if (!link) return false;
  if (req.bidirectional && !link->bidirectional) return false;
  return link->count >= req.count;
}

class Search {
 public:
  Search(const std::vector<const GpuDevice*>& sources, const std::vector<const GpuDevice*>& candidates,
         const std::vector<std::vector<bool>>& usable, const std::vector<LinkRequirement>& requirements,
         const MatchPolicy& policy)
      : sources_(sources), candidates_(candidates), usable_(usable), requirements_(requirements), policy_(policy) {
    // Most constrained source first (fewest usable candidates), ties in record order: fewer dead ends, and the
    // order is a pure function of the inputs.
    for (std::size_t s = 0; s < sources_.size(); ++s) order_.push_back(s);
    auto options = [&](std::size_t s) { return std::count(usable_[s].begin(), usable_[s].end(), true); };
    std::stable_sort(order_.begin(), order_.end(), [&](std::size_t x, std::size_t y) { return options(x) < options(y); });
    max_score_ = 0;
    for (std::size_t s = 0; s < sources_.size(); ++s) {
      int best = 0;
      for (std::size_t c = 0; c < candidates_.size(); ++c)
        if (usable_[s][c]) best = std::max(best, preference(s, c));
      best_possible_.push_back(best);
      max_score_ += best;
    }
  }

  // Best assignment (source index -> candidate index), optionally with one source pinned; empty if none exists.
  std::vector<std::size_t> run(std::optional<std::pair<std::size_t, std::size_t>> pinned = std::nullopt,
                               std::size_t budget = 200000) {
    pinned_ = pinned;
    budget_ = budget;
    best_.clear();
    best_score_ = -1;
    current_.assign(sources_.size(), kNone);
    taken_.assign(candidates_.size(), false);
    descend(0, 0);
    return best_;
  }

  int preference(std::size_t s, std::size_t c) const {
    const GpuDevice& src = *sources_[s];
    const GpuDevice& dst = *candidates_[c];
    int score = 0;
    if (policy_.check_numa && src.numa_node >= 0 && src.numa_node == dst.numa_node) score += 4;
    // Restoring where it ran: keep the same GPU, known by id, or by PCI address after KFD renumbered it.
    if (src.id == dst.id || (!src.uuid.empty() && src.uuid == dst.uuid)) score += 2;
    else if (!src.pci_address.empty() && src.pci_address == dst.pci_address) score += 1;
    return score;
  }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  bool consistent(std::size_t s, std::size_t c) const {
    if (!policy_.check_links) return true;
    for (const auto& req : requirements_) {
      std::size_t other;
      bool s_is_a;
      if (req.a == s) { other = req.b; s_is_a = true; }
      else if (req.b == s) { other = req.a; s_is_a = false; }
      else continue;
      if (current_[other] == kNone) continue;
      const GpuDevice& here = *candidates_[c];
      const GpuDevice& there = *candidates_[current_[other]];
      if (!(s_is_a ? satisfies(req, here, there) : satisfies(req, there, here))) return false;
    }
    return true;
  }

  void descend(std::size_t depth, int score) {
    if (budget_ == 0 || best_score_ == max_score_) return;
    --budget_;
    if (depth == order_.size()) {
      if (score > best_score_) {
        best_score_ = score;
        best_ = current_;
      }
      return;
    }
    int bound = score;
    for (std::size_t d = depth; d < order_.size(); ++d) bound += best_possible_[order_[d]];
    if (bound <= best_score_) return;
    const std::size_t s = order_[depth];
    std::vector<std::size_t> choices;
    for (std::size_t c = 0; c < candidates_.size(); ++c) {
      if (!usable_[s][c] || taken_[c]) continue;
      if (pinned_ && pinned_->first == s && pinned_->second != c) continue;
      choices.push_back(c);
    }
    std::stable_sort(choices.begin(), choices.end(),
                     [&](std::size_t x, std::size_t y) { return preference(s, x) > preference(s, y); });
    for (std::size_t c : choices) {
      if (!consistent(s, c)) continue;
      current_[s] = c;
      taken_[c] = true;
      descend(depth + 1, score + preference(s, c));
      taken_[c] = false;
      current_[s] = kNone;
    }
  }

  const std::vector<const GpuDevice*>& sources_;
  const std::vector<const GpuDevice*>& candidates_;
  const std::vector<std::vector<bool>>& usable_;
  const std::vector<LinkRequirement>& requirements_;
  const MatchPolicy& policy_;
  std::vector<std::size_t> order_;
  std::vector<int> best_possible_;
  int max_score_ = 0;
  std::optional<std::pair<std::size_t, std::size_t>> pinned_;
  std::size_t budget_ = 0;
  std::vector<std::size_t> current_, best_;
  std::vector<bool> taken_;
  int best_score_ = -1;
};

std::vector<LinkRequirement> link_requirements(const std::vector<const GpuDevice*>& sources) {
  std::vector<LinkRequirement> reqs;
  for (std::size_t a = 0; a < sources.size(); ++a) {
    for (std::size_t b = a + 1; b < sources.size(); ++b) {
      const GpuDevice& x = *sources[a];
      const GpuDevice& y = *sources[b];
      if (x.hive_id != 0 && x.hive_id == y.hive_id)
        reqs.push_back({a, b, "hive", true, 1, x.id + " and " + y.id + " were in one XGMI hive"});
      for (const char* type : {"xgmi", "nvlink"}) {
        const GpuLink* link = find_link(x, y.id, type);
        if (!link) continue;
        // A link is bidirectional when either side says so or both sides list it.
        const GpuLink* back = find_link(y, x.id, type);
        const bool bidirectional = link->bidirectional || (back && back->bidirectional);
        const std::uint32_t count = std::max(link->count, back ? back->count : 0u);
        reqs.push_back({a, b, type, bidirectional, std::max(count, 1u),
                        x.id + " and " + y.id + " were linked by " + std::to_string(std::max(count, 1u)) + " " +
                            type + (bidirectional ? " (bidirectional)" : " (unidirectional)")});
      }
    }
  }
  return reqs;
}

// The GPUs the checkpoint used, in its record's order; nullopt, with failure.summary saying why, where the record
// lists a GPU it does not describe.
std::optional<std::vector<const GpuDevice*>> used_gpus(const GpuPropertiesRecord& source, MatchFailure& failure) {
  std::vector<const GpuDevice*> sources;
  for (const auto& id : source.used_gpu_ids) {
    const GpuDevice* gpu = nullptr;
    for (const auto& g : source.node.gpus)
      if (g.id == id) gpu = &g;
    if (!gpu) {
      failure.summary = "the checkpoint's record lists used GPU '" + id + "' but does not describe it";
      return std::nullopt;
    }
    sources.push_back(gpu);
  }
  return sources;
}

// The target GPUs the sources may go to: all of the node's, or those the scheduler assigned (the others are
// rejected as not-allowed for every source); nullopt, with failure.summary saying why, where the scheduler
// assigned a GPU this node does not have.
std::optional<std::vector<const GpuDevice*>> candidate_gpus(const MatchRequest& request,
                                                            const std::vector<const GpuDevice*>& sources,
                                                            MatchFailure& failure) {
  std::set<const GpuDevice*> allowed;
  if (request.allowed_target_ids) {
    for (const auto& key : *request.allowed_target_ids) {
      const GpuDevice* gpu = find_gpu(*request.target, key);
      if (!gpu) {
        failure.summary = "the scheduler assigned GPU '" + key + "', which this node does not have";
        return std::nullopt;
      }
      allowed.insert(gpu);
    }
  }
  std::vector<const GpuDevice*> candidates;
  for (const auto& gpu : request.target->gpus) {
    if (request.allowed_target_ids && !allowed.count(&gpu)) {
      for (const auto* src : sources)
        failure.rejections.push_back({src->id, gpu.id, "not-allowed", "not among the GPUs assigned to this workload"});
      continue;
    }
    candidates.push_back(&gpu);
  }
  return candidates;
}

// What the search works on: the GPUs to place, where they may go, the pairwise checks between the two (made once)
// and the links the placed GPUs must keep.
struct Placement {
  const MatchPolicy& policy;
  std::vector<const GpuDevice*> sources, candidates;
  std::vector<std::vector<bool>> usable;                     // [source][candidate]: passes every enforced check
  std::vector<std::vector<std::vector<Problem>>> waived;     // [source][candidate]: what a relaxed check let through
  std::vector<Rejection> pairwise_rejections;                // what an enforced check ruled out
  std::vector<LinkRequirement> requirements;
};

// Pairwise checks, once. A relaxed check lets the candidate through; what it would have rejected is kept so the
// plan can report exactly the relaxations it relied on.
void check_pairs(Placement& p) {
  p.usable.assign(p.sources.size(), std::vector<bool>(p.candidates.size(), false));
  p.waived.assign(p.sources.size(), std::vector<std::vector<Problem>>(p.candidates.size()));
  for (std::size_t s = 0; s < p.sources.size(); ++s) {
    for (std::size_t c = 0; c < p.candidates.size(); ++c) {
      bool ok = true;
      for (auto& problem : pair_problems(*p.sources[s], *p.candidates[c])) {
        if (relaxed(p.policy, problem.property)) {
          p.waived[s][c].push_back(std::move(problem));
        } else {
          p.pairwise_rejections.push_back({p.sources[s]->id, p.candidates[c]->id, problem.property, problem.detail});
          ok = false;
        }
      }
      p.usable[s][c] = ok;
    }
  }
}

// The plan of the assignment found (source index -> candidate index), with every relaxation it relies on logged.
MatchPlan plan_of(const Placement& p, const std::vector<std::size_t>& best) {
  MatchPlan plan;
  std::size_t numa_kept = 0, numa_known = 0;
  for (std::size_t s = 0; s < p.sources.size(); ++s) {
    const GpuDevice& src = *p.sources[s];
    const GpuDevice& dst = *p.candidates[best[s]];
    plan.assignments.push_back({src.id, dst.id});
    for (const auto& problem : p.waived[s][best[s]])
      plan.relaxations.push_back(problem.property + ": " + src.id + " -> " + dst.id + ": " + problem.detail + " (" +
                                 env_name(problem.property) + "=0)");
    if (src.numa_node >= 0) {
      ++numa_known;
      if (src.numa_node == dst.numa_node) ++numa_kept;
    }
  }
  if (!p.policy.check_links) {
    for (const auto& req : p.requirements) {
      const GpuDevice& ta = *p.candidates[best[req.a]];
      const GpuDevice& tb = *p.candidates[best[req.b]];
      if (!satisfies(req, ta, tb))
        plan.relaxations.push_back("links: " + req.text + ", but " + ta.id + " and " + tb.id +
                                   " are not (GPUCKPT_LINK_CHECK=0)");
    }
  }
  for (const auto& relaxation : plan.relaxations) log::warn("relaxed check used: " + relaxation);
  if (p.policy.check_numa && numa_kept < numa_known)
    log::info("NUMA affinity kept for " + std::to_string(numa_kept) + " of " + std::to_string(numa_known) +
              " GPUs (no assignment satisfying every check keeps more)");
  return plan;
}

// Why source s cannot have candidate c, which passed the pairwise checks, in an assignment that exists: a linked
// partner of s that no usable GPU next to c can take, a source no GPU here can take, too few GPUs, or the search's
// step limit. `passing`: the candidates usable for some source.
Rejection explain_passing_pair(const Placement& p, Search& search, const std::set<std::size_t>& passing,
                               std::size_t s, std::size_t c) {
  Rejection r{p.sources[s]->id, p.candidates[c]->id, "", ""};
  if (p.policy.check_links) {
    for (const auto& req : p.requirements) {
      if (req.a != s && req.b != s) continue;
      const std::size_t other = req.a == s ? req.b : req.a;
      bool partner = false;
      for (std::size_t oc = 0; oc < p.candidates.size() && !partner; ++oc) {
        if (oc == c || !p.usable[other][oc]) continue;
        partner = req.a == s ? satisfies(req, *p.candidates[c], *p.candidates[oc])
                             : satisfies(req, *p.candidates[oc], *p.candidates[c]);
      }
      if (!partner) {
        r.property = "links";
        r.detail = req.text + "; no usable GPU for " + p.sources[other]->id + " is linked to this one that way";
        return r;
      }
    }
  }
  std::size_t stuck = p.sources.size();   // another source GPU that no GPU here can take
  for (std::size_t o = 0; o < p.sources.size() && stuck == p.sources.size(); ++o)
    if (o != s && std::none_of(p.usable[o].begin(), p.usable[o].end(), [](bool u) { return u; })) stuck = o;
  if (stuck != p.sources.size()) {
    r.property = "incomplete";
    r.detail = "passes every check, but " + p.sources[stuck]->id + " (also used by the workload) has no GPU here";
  } else if (passing.size() < p.sources.size()) {
    r.property = "taken";
    r.detail = "only " + std::to_string(passing.size()) + " GPU(s) here pass the checks for the " +
               std::to_string(p.sources.size()) + " GPUs the checkpoint used";
  } else if (!search.run(std::make_pair(s, c)).empty()) {
    r.property = "search-limit";
    r.detail = "an assignment with this GPU may exist, but the search stopped after its step limit";
  } else {
    r.property = p.policy.check_links && !p.requirements.empty() ? "links" : "taken";
    r.detail = "no complete assignment with this GPU keeps the other GPUs' links and checks";
  }
  return r;
}

// No assignment: explain every (source, candidate) pair, grouped by source in record order. Pairwise rejections
// say it directly; a candidate that passed them failed because of the others.
void explain_no_assignment(const Placement& p, Search& search, MatchFailure& failure) {
  failure.rejections.insert(failure.rejections.end(), p.pairwise_rejections.begin(), p.pairwise_rejections.end());
  std::set<std::size_t> passing;
  for (std::size_t s = 0; s < p.sources.size(); ++s)
    for (std::size_t c = 0; c < p.candidates.size(); ++c)
      if (p.usable[s][c]) passing.insert(c);
  for (std::size_t s = 0; s < p.sources.size(); ++s)
    for (std::size_t c = 0; c < p.candidates.size(); ++c)
      if (p.usable[s][c]) failure.rejections.push_back(explain_passing_pair(p, search, passing, s, c));
  std::stable_sort(failure.rejections.begin(), failure.rejections.end(),
                   [&](const Rejection& x, const Rejection& y) {
                     auto index = [&](const std::string& id) {
                       for (std::size_t s = 0; s < p.sources.size(); ++s)
                         if (p.sources[s]->id == id) return s;
                       return p.sources.size();
                     };
                     return index(x.source_id) < index(y.source_id);
                   });
  failure.summary = "no assignment of this node's " + std::to_string(p.candidates.size()) +
                    " candidate GPU(s) fits the " + std::to_string(p.sources.size()) + " GPU(s) the checkpoint used";
  if (p.candidates.empty()) failure.summary = "this node has no candidate GPU for the checkpoint's " +
                                              std::to_string(p.sources.size()) + " GPU(s)";
}

}  // namespace

std::variant<MatchPlan, MatchFailure> match_gpus(const MatchRequest& request) {
  MatchFailure failure;
  if (!request.source || !request.target) {
    failure.summary = "internal error: match request without a source record or a target inventory";
    return failure;
  }
  auto sources = used_gpus(*request.source, failure);
  if (!sources) return failure;
  if (sources->empty()) return MatchPlan{};
  auto candidates = candidate_gpus(request, *sources, failure);
  if (!candidates) return failure;

  Placement p{request.policy, std::move(*sources), std::move(*candidates), {}, {}, {}, {}};
  check_pairs(p);
  p.requirements = link_requirements(p.sources);
  Search search(p.sources, p.candidates, p.usable, p.requirements, p.policy);
  if (const auto best = search.run(); !best.empty()) return plan_of(p, best);
  explain_no_assignment(p, search, failure);
  return failure;
}

}  // namespace gpuckpt
