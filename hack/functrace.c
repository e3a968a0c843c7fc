/* Records the functions a command runs (and the threads and processes it starts, until
 * they exec another program), in the order first run: a breakpoint (int3) on the entry of
 * every function listed in FUNCS (hex addresses as `nm` prints them, relative to the
 * binary's load address), each removed the first time it is hit. One ptrace stop per
 * function, not per instruction: a warm `capsule exec -- /bin/true` takes well under a
 * second. Writes the runtime address of each function hit, one hex address per line, to
 * OUT and the traced program's mappings to OUT.maps (the format hack/exec-order.sh reads).
 *
 *   functrace FUNCS OUT CMD [ARGS...]
 *
 * A forked child has its own copy of the code (with the breakpoints not yet hit), so a
 * breakpoint is removed in the memory of the process that hit it; threads share theirs.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t *fn;     /* function addresses (runtime), sorted */
static unsigned char *orig, *seen;
static size_t nfn;

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static long find(uint64_t a) {
  size_t lo = 0, hi = nfn;
  while (lo < hi) {
    size_t m = (lo + hi) / 2;
    if (fn[m] < a) lo = m + 1;
    else hi = m;
  }
  return lo < nfn && fn[lo] == a ? (long)lo : -1;
}

static int mem(pid_t p) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/mem", p);
  return open(path, O_RDWR | O_CLOEXEC);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: functrace FUNCS OUT CMD [ARGS...]\n");
    return 2;
  }
  FILE *fl = fopen(argv[1], "r"), *out = fopen(argv[2], "w");
  if (!fl || !out) {
    perror("functrace");
    return 1;
  }
  size_t cap = 1 << 16;
  fn = malloc(cap * 8);
  unsigned long long a;
  while (fn && fscanf(fl, "%llx", &a) == 1) {
    if (nfn == cap) fn = realloc(fn, (cap *= 2) * 8);
    if (fn) fn[nfn++] = a;
  }
  fclose(fl);
  orig = calloc(nfn + 1, 1);
  seen = calloc(nfn + 1, 1);
  if (!fn || !orig || !seen) {
    perror("functrace");
    return 1;
  }
  pid_t p = fork();
  if (p < 0) {
    perror("fork");
    return 1;
  }
  if (!p) {
    ptrace(PTRACE_TRACEME, 0, 0, 0);
    raise(SIGSTOP);
    execvp(argv[3], argv + 3);
    _exit(127);
  }
  int st;
  if (waitpid(p, &st, 0) < 0 ||
      ptrace(PTRACE_SETOPTIONS, p, 0,
             PTRACE_O_TRACECLONE | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK |
                 PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL) < 0) {
    perror("ptrace");
    return 1;
  }
  ptrace(PTRACE_CONT, p, 0, 0);
  for (;;) {
    if (waitpid(p, &st, 0) < 0 || !WIFSTOPPED(st)) {
      fprintf(stderr, "functrace: %s did not start\n", argv[3]);
      return 1;
    }
    if (st >> 8 == (SIGTRAP | (PTRACE_EVENT_EXEC << 8))) break;
    ptrace(PTRACE_CONT, p, 0, 0);
  }
  /* the mappings, and the load address: the executable's mapping at file offset 0 */
  char maps[64], path[4096], exe[4096];
  snprintf(maps, sizeof maps, "/proc/%d/maps", p);
  snprintf(path, sizeof path, "%s.maps", argv[2]);
  snprintf(exe, sizeof exe, "/proc/%d/exe", p);
  char real[4096];
  ssize_t rl = readlink(exe, real, sizeof real - 1);
  if (rl < 0) {
    perror("readlink");
    return 1;
  }
  real[rl] = 0;
  FILE *in = fopen(maps, "r"), *mo = fopen(path, "w");
  if (!in || !mo) {
    perror("maps");
    return 1;
  }
  uint64_t base = 0;
  int found = 0;
  char line[8192];
  while (fgets(line, sizeof line, in)) {
    fputs(line, mo);
    unsigned long long lo, off;
    char file[4096] = "";
    if (!found && sscanf(line, "%llx-%*llx %*s %llx %*s %*s %4095s", &lo, &off, file) >= 2 &&
        off == 0 && strcmp(file, real) == 0) {
      base = lo;
      found = 1;
    }
  }
  fclose(in);
  fclose(mo);
  if (!found) {
    fprintf(stderr, "functrace: %s is not in its own mappings\n", real);
    return 1;
  }
  for (size_t i = 0; i < nfn; i++) fn[i] += base;
  qsort(fn, nfn, 8, cmp);
  int m = mem(p);
  unsigned char cc = 0xcc;
  size_t set = 0;
  for (size_t i = 0; i < nfn; i++) {
    if (i && fn[i] == fn[i - 1]) {
      seen[i] = 1; /* an alias: its twin holds the breakpoint */
      continue;
    }
    if (pread(m, &orig[i], 1, (off_t)fn[i]) == 1 && pwrite(m, &cc, 1, (off_t)fn[i]) == 1) set++;
    else seen[i] = 1;
  }
  close(m);
  ptrace(PTRACE_CONT, p, 0, 0);
  size_t hits = 0;
  pid_t t;
  while ((t = waitpid(-1, &st, __WALL)) > 0) {
    if (!WIFSTOPPED(st)) continue;
    int sig = WSTOPSIG(st), ev = st >> 16;
    if (sig == SIGTRAP && ev == PTRACE_EVENT_EXEC) {
      /* another program (the sandboxed command): not ours to record */
      ptrace(PTRACE_DETACH, t, 0, 0);
      continue;
    }
    if (sig == SIGTRAP && !ev) {
      struct user_regs_struct r;
      ptrace(PTRACE_GETREGS, t, 0, &r);
      long i = find(r.rip - 1);
      if (i >= 0) {
        if (!seen[i]) {
          seen[i] = 1;
          fprintf(out, "%llx\n", (unsigned long long)fn[i]);
          hits++;
        }
        /* put the instruction back in this process (a thread may find it done) */
        int tm = mem(t);
        unsigned char now = 0;
        if (tm >= 0) {
          if (pread(tm, &now, 1, (off_t)fn[i]) == 1 && now == 0xcc)
            if (pwrite(tm, &orig[i], 1, (off_t)fn[i]) != 1) perror("functrace: restore");
          close(tm);
        }
        r.rip -= 1;
        ptrace(PTRACE_SETREGS, t, 0, &r);
        sig = 0;
      }
    } else if (sig == SIGTRAP || sig == SIGSTOP) {
      /* an event stop, or a new thread's or process's first stop */
      sig = 0;
    }
    ptrace(PTRACE_CONT, t, 0, sig);
  }
  fclose(out);
  fprintf(stderr, "functrace: %zu breakpoints, %zu functions run\n", set, hits);
  return 0;
}
