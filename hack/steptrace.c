/* Single-steps a command (and the threads and processes it starts, until they exec
 * another program) with ptrace and writes every distinct instruction address it ran, in
 * the order first run, one hex address per line; the traced program's mappings go to
 * OUT.maps. For hack/exec-order.sh, which turns the addresses into the link order of
 * capsule's functions. Slow on purpose (one ptrace stop per instruction): a warm
 * `capsule exec -- /bin/true` takes hours. hack/exec-order.sh uses hack/functrace.c, which
 * stops once per function; this stays to check it against (same functions, every address).
 *
 *   steptrace OUT CMD [ARGS...]
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>

#define SLOTS (1u << 24)
static uint64_t *slot, *order;
static size_t n;

static void add(uint64_t a) {
  uint64_t h = (a * 0x9E3779B97F4A7C15ull) >> 40;
  for (;; h++) {
    h &= SLOTS - 1;
    if (slot[h] == a) return;
    if (!slot[h]) {
      slot[h] = a;
      order[n++] = a;
      return;
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: steptrace OUT CMD [ARGS...]\n");
    return 2;
  }
  slot = calloc(SLOTS, 8);
  order = calloc(SLOTS, 8);
  FILE *out = fopen(argv[1], "w");
  if (!slot || !order || !out) {
    perror("steptrace");
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
    execvp(argv[2], argv + 2);
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
      fprintf(stderr, "steptrace: %s did not start\n", argv[2]);
      return 1;
    }
    if (st >> 8 == (SIGTRAP | (PTRACE_EVENT_EXEC << 8))) break;
    ptrace(PTRACE_CONT, p, 0, 0);
  }
  char maps[64], path[4096];
  snprintf(maps, sizeof maps, "/proc/%d/maps", p);
  snprintf(path, sizeof path, "%s.maps", argv[1]);
  FILE *in = fopen(maps, "r"), *mo = fopen(path, "w");
  if (!in || !mo) {
    perror("maps");
    return 1;
  }
  int c;
  while ((c = fgetc(in)) != EOF) fputc(c, mo);
  fclose(in);
  fclose(mo);
  long steps = 0;
  ptrace(PTRACE_SINGLESTEP, p, 0, 0);
  pid_t t;
  while ((t = waitpid(-1, &st, __WALL)) > 0) {
    if (!WIFSTOPPED(st)) continue;
    int sig = WSTOPSIG(st), ev = st >> 16;
    if (sig == SIGTRAP && ev == PTRACE_EVENT_EXEC) {
      /* another program (the sandboxed command): not ours to record */
      ptrace(PTRACE_DETACH, t, 0, 0);
      continue;
    }
    if (sig == SIGTRAP) {
      if (!ev) {
        long rip = ptrace(PTRACE_PEEKUSER, t, offsetof(struct user_regs_struct, rip), 0);
        add((uint64_t)rip);
        steps++;
      }
      sig = 0;
    } else if (sig == SIGSTOP) {
      /* a new thread's or process's first stop; a SIGSTOP sent to the command is dropped
       * too, which a traced exec never gets */
      sig = 0;
    }
    ptrace(PTRACE_SINGLESTEP, t, 0, sig);
  }
  for (size_t i = 0; i < n; i++) fprintf(out, "%llx\n", (unsigned long long)order[i]);
  fclose(out);
  fprintf(stderr, "steptrace: %ld instructions, %zu distinct addresses\n", steps, n);
  return 0;
}
