/* The process a `c` kernel runs in (read-only; provided by the harness).
 *
 * A compiled kernel is native code: whatever its symbols say, pointer arithmetic from any libc function
 * reaches every library loaded beside it. So it does not run in the candidate's Python process (which
 * holds libpython and libtorch) but here, in a process that holds only libc, libm, OpenMP and the kernel.
 *
 *   kernel_host SOCKET_FD LIBRARY THREADS PARENT_PID FUNCTION...
 *
 * In order: die with the parent; start the OpenMP team, then start no process or thread (RLIMIT_NPROC 0);
 * open the library (its symbols and load-time code were checked before: elf.py) and resolve the
 * functions; reset every signal handler; install the syscall filter the parent sends
 * (syscalls.host_program: a denied call traps here, is reported, and the process ends); answer "ready".
 * Then serve requests. Memory comes as memfds, each under an id: the call's inputs (mapped before the
 * call, unmapped after it), the outputs the forward allocated (mapped once: ckernel.py uses the same
 * memfds again), and id 0, an argument memory into which ckernel.py copies any other tensor. A call
 * names the function, its integer and pointer arguments (a pointer as a memory id and an offset) and
 * its float arguments; the answer goes when the function has returned.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <ucontext.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <omp.h>

#define MAX_INTS 16
#define MAX_FLOATS 8
#define MAX_FUNCTIONS 256
#define MAX_FILTER 4096

enum { OP_CALL = 1, OP_ARENA = 2, OP_FILTER = 3, OP_MAP = 4, OP_UNMAP = 5 };
enum { OK = 0, FAILED = 1, DENIED = 2 };

#define MAX_MAPS 64

struct request {
    uint32_t op, fn, ptr_mask, nbytes;
    int64_t ints[MAX_INTS];
    float floats[MAX_FLOATS];
    uint8_t ids[MAX_INTS];   /* a call: each pointer's memory (0 the argument memory); map, unmap: which */
    uint64_t sizes[MAX_INTS]; /* map: the bytes of each descriptor */
};
_Static_assert(sizeof(struct request) == 320, "the layout ckernel.py packs (no padding)");

struct answer {
    int32_t status;
    int32_t nr;
    int64_t args[6];
    char text[200];
};

/* Integer-class arguments fill the integer registers and then the stack in order, float ones the vector
 * registers (x86-64 and AArch64 C calling conventions), so one signature calls any kernel taking up to
 * MAX_INTS integers or pointers and MAX_FLOATS floats, whatever their order. */
typedef void (*kernel_fn)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                          int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float, float, float,
                          float, float, float, float, float);

static int channel = -1;

static void answer(int status, const char *text) {
    struct answer a;
    memset(&a, 0, sizeof a);
    a.status = status;
    if (text)
        strncpy(a.text, text, sizeof a.text - 1);
    if (send(channel, &a, sizeof a, 0) < 0)
        _exit(2);
}

/* A call the filter denied: tell the parent which, then end. */
static void denied(int sig, siginfo_t *info, void *context) {
    (void)sig;
    struct answer a;
    memset(&a, 0, sizeof a);
    a.status = DENIED;
    a.nr = info->si_syscall;
#if defined(__x86_64__)
    greg_t *r = ((ucontext_t *)context)->uc_mcontext.gregs;
    int64_t args[6] = {r[REG_RDI], r[REG_RSI], r[REG_RDX], r[REG_R10], r[REG_R8], r[REG_R9]};
    memcpy(a.args, args, sizeof args);
#elif defined(__aarch64__)
    memcpy(a.args, ((ucontext_t *)context)->uc_mcontext.regs, sizeof a.args);
#else
    (void)context;
#endif
    send(channel, &a, sizeof a, 0);
    _exit(3);
}

static int receive(struct request *req, int *fds, int *nfds) {
    char control[CMSG_SPACE(MAX_INTS * sizeof(int))];
    struct iovec iov = {req, sizeof *req};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = recvmsg(channel, &msg, 0);
    if (n <= 0)
        _exit(0); /* the parent is gone */
    *nfds = 0;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        *nfds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        memcpy(fds, CMSG_DATA(c), *nfds * sizeof(int));
    }
    return (size_t)n == sizeof *req;
}

int main(int argc, char **argv) {
    if (argc < 5)
        return 64;
    channel = atoi(argv[1]);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != (pid_t)atol(argv[4]))
        return 65;
    int nfunctions = argc - 5;
    if (nfunctions > MAX_FUNCTIONS) {
        answer(FAILED, "the library exports more functions than the kernel host serves");
        return 1;
    }
    int threads = atoi(argv[3]);
    omp_set_num_threads(threads > 0 ? threads : 1);
#pragma omp parallel
    {
        (void)0; /* the team the kernel may use, started before threads are refused */
    }
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_NPROC, &none);
    setrlimit(RLIMIT_MSGQUEUE, &none);
    void *library = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        answer(FAILED, dlerror());
        return 1;
    }
    static kernel_fn functions[MAX_FUNCTIONS];
    for (int i = 0; i < nfunctions; i++) {
        functions[i] = (kernel_fn)dlsym(library, argv[5 + i]);
        if (!functions[i]) {
            answer(FAILED, "a function of the library could not be resolved");
            return 1;
        }
    }
    /* every handler back to its default (what load-time code may have set is gone), but ours for SIGSYS */
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            signal(sig, SIG_DFL);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = denied;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGSYS, &action, NULL);

    struct request req;
    int fds[MAX_INTS], nfds;
    static unsigned char program[MAX_FILTER * 8];
    if (!receive(&req, fds, &nfds) || req.op != OP_FILTER || req.nbytes > sizeof program || req.nbytes % 8) {
        answer(FAILED, "expected the syscall filter first");
        return 1;
    }
    ssize_t got = recv(channel, program, req.nbytes, 0);
    if (got != (ssize_t)req.nbytes) {
        answer(FAILED, "the syscall filter did not arrive whole");
        return 1;
    }
    struct sock_fprog prog = {(unsigned short)(req.nbytes / 8), (struct sock_filter *)program};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
        syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog)) {
        answer(FAILED, "seccomp refused the kernel host's syscall filter");
        return 1;
    }
    answer(OK, "ready");

    /* memory by id: 0 the argument memory (copies), others memfds of tensors, mapped until unmapped */
    static char *base[MAX_MAPS];
    static uint64_t size[MAX_MAPS];
    for (;;) {
        int ok = receive(&req, fds, &nfds);
        const char *why = NULL;
        if (ok && (req.op == OP_ARENA || req.op == OP_MAP)) {
            for (int j = 0; j < nfds; j++) {
                unsigned id = req.op == OP_ARENA ? 0 : req.ids[j];
                uint64_t bytes = req.op == OP_ARENA ? (uint64_t)req.ints[0] : req.sizes[j];
                if (id >= MAX_MAPS || (req.op == OP_MAP && id == 0)) {
                    why = "no such memory";
                } else {
                    if (base[id])
                        munmap(base[id], size[id]);
                    base[id] = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fds[j], 0);
                    size[id] = bytes;
                    if (base[id] == MAP_FAILED) {
                        base[id] = NULL;
                        why = "a tensor's memory could not be mapped";
                    }
                }
                close(fds[j]);
            }
        } else if (ok && req.op == OP_UNMAP && req.nbytes <= MAX_INTS) {
            for (uint32_t j = 0; j < req.nbytes; j++) {
                unsigned id = req.ids[j];
                if (id && id < MAX_MAPS && base[id]) {
                    munmap(base[id], size[id]);
                    base[id] = NULL;
                }
            }
        } else if (ok && req.op == OP_CALL && req.fn < (uint32_t)nfunctions) {
            int64_t *a = req.ints;
            for (int i = 0; i < MAX_INTS && !why; i++)
                if (req.ptr_mask >> i & 1) {
                    unsigned id = req.ids[i];
                    if (id >= MAX_MAPS || !base[id] || (uint64_t)a[i] > size[id])
                        why = "a pointer argument lies outside the memory it was given";
                    else
                        a[i] = (int64_t)(intptr_t)(base[id] + a[i]);
                }
            if (!why) {
                float *f = req.floats;
                functions[req.fn](a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                                  a[12], a[13], a[14], a[15], f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]);
            }
        } else {
            for (int j = 0; j < nfds; j++)
                close(fds[j]);
            why = "malformed request";
        }
        answer(why ? FAILED : OK, why);
    }
}
