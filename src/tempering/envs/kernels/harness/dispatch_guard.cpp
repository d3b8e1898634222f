// A ban at torch's dispatcher while an extension call runs (torch_ext, cuda). Every ATen op that passes
// the dispatcher runs a RecordFunction callback, whatever switched off above it (torch-function modes,
// dispatch modes, dispatch keys): while the harness has it armed, the first op not on the allow-list
// (allocation, views, copies) is kept, and the harness refuses the call naming it. Built once per
// verifier; the candidate's process loads it (ctypes) before any submission code runs.
#include <ATen/record_function.h>

#include <atomic>
#include <cstring>
#include <set>
#include <string>

namespace {
std::atomic<bool> armed{false};
std::atomic<bool> refused{false};
char first_refused[256];
std::set<std::string>* allowed = nullptr;

std::unique_ptr<at::ObserverContext> on_op(const at::RecordFunction& fn) {
    if (!armed.load(std::memory_order_relaxed)) return nullptr;
    const char* name = fn.name();
    const char* op = std::strncmp(name, "aten::", 6) == 0 ? name + 6 : name;
    if (allowed->count(op)) return nullptr;
    bool was = false;
    if (refused.compare_exchange_strong(was, true)) {
        std::strncpy(first_refused, name, sizeof(first_refused) - 1);
    }
    return nullptr;
}
}  // namespace

extern "C" {
// `names`: the ATen ops an extension call may run, one per line. Registers the callback for every thread.
int guard_install(const char* names) {
    allowed = new std::set<std::string>();
    for (const char* p = names; *p;) {
        const char* end = std::strchr(p, '\n');
        size_t n = end ? size_t(end - p) : std::strlen(p);
        if (n) allowed->insert(std::string(p, n));
        p += n + (end ? 1 : 0);
    }
    at::addGlobalCallback(at::RecordFunctionCallback(on_op).needsInputs(false).needsOutputs(false).scopes(
        {at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
    return 0;
}

void guard_arm(int on) { armed.store(on != 0); }

// 1, with the first refused op's name in `buf`, if one ran since the last call; else 0.
int guard_take(char* buf, int size) {
    if (!refused.load()) return 0;
    std::strncpy(buf, first_refused, size - 1);
    buf[size - 1] = 0;
    refused.store(false);
    return 1;
}

// Whether the callback still runs on this thread (record functions on, global callbacks in place).
int guard_intact() { return at::isRecordFunctionEnabled() && at::hasGlobalCallbacks() ? 1 : 0; }
}
