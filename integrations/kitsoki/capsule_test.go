//go:build !windows

// Tests of the capsule backend, modelled on Kitsoki's own tests of the supervised and
// fake backends. They drive a real `capsule` binary ($CAPSULE_BIN, else `capsule` on
// PATH) against capsules opened in a scratch folder: a scratch HOME with a credential,
// a source repository, and a capsule root of their own.
package agentruntime

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type capsuleEnv struct {
	rt   *Capsule
	base string
	home string
	ws   string
}

func capsuleBin(t *testing.T) string {
	if b := os.Getenv("CAPSULE_BIN"); b != "" {
		return b
	}
	b, err := exec.LookPath("capsule")
	if err != nil {
		t.Skip("no capsule binary: set CAPSULE_BIN")
	}
	return b
}

func sh(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// newCapsuleEnv opens a capsule `k` of a one-commit repository (tracked.txt = "old").
func newCapsuleEnv(t *testing.T) *capsuleEnv {
	t.Helper()
	bin := capsuleBin(t)
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(base, "home")
	src := filepath.Join(base, "src")
	for _, d := range []string{filepath.Join(home, ".ssh"), src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519"), []byte("SSH-KEY-SECRET\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "HOME="+home, "CAPSULE_ROOT="+filepath.Join(base, "root"), "XDG_CONFIG_HOME=", "XDG_DATA_HOME=")
	git := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
	sh(t, src, git, "git", "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(src, "tracked.txt"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, src, git, "git", "add", "tracked.txt")
	sh(t, src, git, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
	rt := NewCapsule(CapsuleOptions{Binary: bin})
	rt.env = env
	sh(t, base, rt.env[len(os.Environ()):], bin, "open", "--name", "k", "--source", src)
	ws := filepath.Join(base, "root", "workspaces", "k")
	return &capsuleEnv{rt: rt, base: base, home: home, ws: ws}
}

func (e *capsuleEnv) run(t *testing.T, spec LaunchSpec) (Result, AppliedPolicy) {
	t.Helper()
	if spec.Dir == "" {
		spec.Dir = e.ws
	}
	if spec.Command == "" {
		spec.Command = "/bin/sh"
	}
	running, policy, err := e.rt.Launch(context.Background(), spec)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	res, err := running.Wait(context.Background())
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return res, policy
}

func requireOS(t *testing.T, rt *Capsule) Capabilities {
	caps := rt.Probe(context.Background())
	if caps.Strength != StrengthOSConfined {
		t.Fatalf("capsule strength %s, want os_confined (features %v)", caps.Strength, caps.Features)
	}
	return caps
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestCapsuleProbeAndRegistrySelectsCapsuleForOSConfined(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	caps := requireOS(t, e.rt)
	for _, f := range []string{"namespaces", "landlock", "seccomp", "network_deny"} {
		if !has(caps.Features, f) {
			t.Errorf("feature %s missing: %v", f, caps.Features)
		}
	}
	reg := NewRegistry(NewSupervised(), NewFake(StrengthFSConfined), e.rt)
	rt, cap, ok := reg.Select(context.Background(), StrengthOSConfined)
	if !ok || rt.Name() != "capsule" || cap.Strength != StrengthOSConfined {
		t.Fatalf("Select(os_confined) = %v %v %v", rt, cap, ok)
	}
	// the smallest satisfying backend for less
	rt, _, _ = reg.Select(context.Background(), StrengthSupervised)
	if rt.Name() != "supervised" {
		t.Fatalf("Select(supervised) = %s", rt.Name())
	}
}

func TestCapsuleUnavailableFailsClosed(t *testing.T) {
	t.Parallel()
	rt := NewCapsule(CapsuleOptions{Binary: filepath.Join(t.TempDir(), "no-capsule")})
	if st := rt.Probe(context.Background()).Strength; st != StrengthNone {
		t.Fatalf("strength %s, want none", st)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	spec := LaunchSpec{Command: "/bin/sh", Args: []string{"-c", "touch " + marker}, Dir: t.TempDir(), Min: StrengthOSConfined, Degrade: DegradeFail}
	reg := NewRegistry(rt)
	if _, _, err := reg.Launch(context.Background(), spec); err == nil {
		t.Fatal("registry launched with no backend satisfying os_confined under degrade: fail")
	}
	if _, _, err := rt.Launch(context.Background(), spec); err == nil {
		t.Fatal("capsule backend launched without capsule")
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("something ran: %v", err)
	}
}

func TestCapsuleDirOutsideCapsuleFailsClosed(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	outside := filepath.Join(e.base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.rt.Launch(context.Background(), LaunchSpec{Command: "/bin/sh", Args: []string{"-c", "touch ran"}, Dir: outside})
	if err == nil || !strings.Contains(err.Error(), "not inside an opened capsule") {
		t.Fatalf("Launch outside a capsule: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "ran")); !os.IsNotExist(err) {
		t.Fatal("the command ran outside a capsule")
	}
}

func TestCapsuleDeclaredWriteAllowedRepoWriteDenied(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	res, policy := e.run(t, LaunchSpec{
		Args:     []string{"-c", "echo ok > allowed/out.txt && echo nope > outside.txt"},
		RepoRoot: e.ws, Min: StrengthOSConfined, Repo: RepoReadOnly, RW: []string{"allowed"},
	})
	if policy.Backend != "capsule" || policy.Strength != StrengthOSConfined || policy.Repo != RepoReadOnly {
		t.Fatalf("policy %#v", policy)
	}
	if len(policy.RW) != 1 || policy.RW[0] != filepath.Join(e.ws, "allowed") || len(policy.Degraded) != 0 {
		t.Fatalf("policy %#v", policy)
	}
	if got, err := os.ReadFile(filepath.Join(e.ws, "allowed/out.txt")); err != nil || string(got) != "ok\n" {
		t.Fatalf("declared write: %q %v (%#v)", got, err, res)
	}
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "Read-only") {
		t.Fatalf("repo write not refused: %#v", res)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "outside.txt")); !os.IsNotExist(err) {
		t.Fatal("repo write landed under read_only")
	}
	// its .git too
	res, _ = e.run(t, LaunchSpec{Args: []string{"-c", "echo x > .git/planted"}, Repo: RepoReadOnly})
	if res.ExitCode == 0 {
		t.Fatalf(".git writable under read_only: %#v", res)
	}
	// without read_only the workspace is writable
	res, _ = e.run(t, LaunchSpec{Args: []string{"-c", "echo yes > free.txt"}})
	if res.ExitCode != 0 {
		t.Fatalf("workspace write: %#v", res)
	}
}

func TestCapsuleRWSymlinkInWorkspaceRefused(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	// a task left a symlink where a later rw door is declared
	if err := os.Symlink(filepath.Join(e.home, ".ssh"), filepath.Join(e.ws, "door")); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.rt.Launch(context.Background(), LaunchSpec{Command: "/bin/sh", Args: []string{"-c", "echo x > door/authorized_keys"}, Dir: e.ws, Repo: RepoReadOnly, RW: []string{"door"}})
	if err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("rw through a symlink: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.home, ".ssh/authorized_keys")); !os.IsNotExist(err) {
		t.Fatal("wrote through the symlink")
	}
}

func TestCapsuleHiddenBeatsRW(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	if err := os.MkdirAll(filepath.Join(e.ws, "secret"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.ws, "secret/key"), []byte("HIDDEN-KEY"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, policy := e.run(t, LaunchSpec{
		Args: []string{"-c", "cat secret/key; echo w > secret/new && echo WROTE"},
		Repo: RepoReadOnly, RW: []string{"secret", "allowed"}, Hidden: []string{"secret"},
	})
	if strings.Contains(res.Stdout, "HIDDEN-KEY") || strings.Contains(res.Stdout, "WROTE") {
		t.Fatalf("hidden path readable or writable through rw: %#v", res)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "secret/new")); !os.IsNotExist(err) {
		t.Fatal("write landed in a hidden path")
	}
	if has(policy.RW, filepath.Join(e.ws, "secret")) || !has(policy.Hidden, filepath.Join(e.ws, "secret")) {
		t.Fatalf("policy %#v", policy)
	}
}

func TestCapsuleHiddenCredentialUnreadable(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	creds := filepath.Join(e.base, "creds")
	if err := os.MkdirAll(creds, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "token"), []byte("CRED-TOKEN"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, _ := e.run(t, LaunchSpec{
		Args:   []string{"-c", "cat \"$HOME/.ssh/id_ed25519\"; cat " + creds + "/token; echo done"},
		Env:    []string{"PATH=/usr/bin:/bin", "HOME=" + e.home},
		Hidden: []string{creds},
	})
	if strings.Contains(res.Stdout, "SSH-KEY") || strings.Contains(res.Stdout, "CRED-TOKEN") || !strings.Contains(res.Stdout, "done") {
		t.Fatalf("credential readable: %#v", res)
	}
}

func TestCapsuleSecretTokenNotVisibleUnlessPassed(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	e.rt.env = append(e.rt.env, "SECRET_TOKEN=leak") // in capsule's own environment
	res, _ := e.run(t, LaunchSpec{
		Args: []string{"-c", "printf 'secret=%s\\nprovider=%s\\nmulti=%s\\n' \"$SECRET_TOKEN\" \"$ANTHROPIC_API_KEY\" \"$MULTI\""},
		Env:  []string{"PATH=" + os.Getenv("PATH"), "ANTHROPIC_API_KEY=model-key", "MULTI=a b\nc"},
	})
	if strings.Contains(res.Stdout, "leak") {
		t.Fatalf("SECRET_TOKEN of the host reached the command: %q", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "provider=model-key") || !strings.Contains(res.Stdout, "multi=a b\nc") {
		t.Fatalf("Env not passed as given: %q %q", res.Stdout, res.Stderr)
	}
	// passed, it is visible
	res, _ = e.run(t, LaunchSpec{
		Args: []string{"-c", "printf 'secret=%s' \"$SECRET_TOKEN\""},
		Env:  []string{"SECRET_TOKEN=given"},
	})
	if res.Stdout != "secret=given" {
		t.Fatalf("passed variable: %q", res.Stdout)
	}
}

func TestCapsuleStdin(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	res, _ := e.run(t, LaunchSpec{Args: []string{"-c", "tr a-z A-Z"}, Stdin: strings.NewReader("hello\n")})
	if res.Stdout != "HELLO\n" {
		t.Fatalf("stdin: %#v", res)
	}
}

// after a kill, the background child (which would touch late after 800 ms) must be gone
func checkTreeGone(t *testing.T, ws string) {
	time.Sleep(1200 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(ws, "late")); !os.IsNotExist(err) {
		t.Fatal("a child of the killed command survived and wrote late")
	}
}

func TestCapsuleTimeoutKillsTree(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	res, _ := e.run(t, LaunchSpec{
		Args:      []string{"-c", "(sleep 0.8; touch late) & wait"},
		Resources: ResourcePolicy{Timeout: 300 * time.Millisecond},
	})
	if !res.Killed || res.KillReason != "timeout" || res.ExitCode != 124 {
		t.Fatalf("timeout: %#v", res)
	}
	checkTreeGone(t, e.ws)
}

func TestCapsuleActivityTimeoutKillsSilentTree(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	res, _ := e.run(t, LaunchSpec{
		Args:      []string{"-c", "echo start; (sleep 0.8; touch late) & wait"},
		Resources: ResourcePolicy{ActivityTimeout: 300 * time.Millisecond},
	})
	if !res.Killed || res.KillReason != "activity_timeout" {
		t.Fatalf("activity timeout: %#v", res)
	}
	checkTreeGone(t, e.ws)
	// progressing output renews it
	res, _ = e.run(t, LaunchSpec{
		Args:      []string{"-c", "i=0; while [ $i -lt 10 ]; do echo tick; sleep 0.05; i=$((i+1)); done"},
		Resources: ResourcePolicy{ActivityTimeout: 400 * time.Millisecond},
	})
	if res.Killed || res.ExitCode != 0 {
		t.Fatalf("progressing run killed: %#v", res)
	}
	// semantic activity: thinking tokens do not count
	res, _ = e.run(t, LaunchSpec{
		Args:             []string{"-c", "i=0; while [ $i -lt 30 ]; do printf '{\"type\":\"system\",\"subtype\":\"thinking_tokens\"}\\n'; sleep 0.04; i=$((i+1)); done"},
		SemanticActivity: true,
		Resources:        ResourcePolicy{ActivityTimeout: 300 * time.Millisecond},
	})
	if !res.Killed || res.KillReason != "activity_timeout" {
		t.Fatalf("thinking tokens renewed activity: %#v", res)
	}
}

func TestCapsuleCancelKillsTree(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	running, _, err := e.rt.Launch(ctx, LaunchSpec{Command: "/bin/sh", Args: []string{"-c", "(sleep 0.8; touch late) & wait"}, Dir: e.ws})
	if err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	res, err := running.Wait(context.Background())
	if err != nil || !res.Killed || res.KillReason != "cancelled" {
		t.Fatalf("cancel: %#v %v", res, err)
	}
	checkTreeGone(t, e.ws)
}

func TestCapsuleCapturesFinalDiff(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	// a task plants an external diff driver in the workspace's git config: it must not
	// run on the host (capsule's guard reduces the config; the diff runs in the sandbox)
	marker := filepath.Join(e.base, "driver-ran")
	res, _ := e.run(t, LaunchSpec{
		Args:     []string{"-c", "printf 'new\\n' > tracked.txt; printf '[diff]\\n\\texternal = touch " + marker + "\\n' >> .git/config"},
		RepoRoot: e.ws,
	})
	if !strings.Contains(res.FinalDiff, "-old") || !strings.Contains(res.FinalDiff, "+new") {
		t.Fatalf("final diff: %q (%#v)", res.FinalDiff, res)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatal("the workspace's diff driver ran")
	}
}

func TestCapsuleNetworkMapping(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	res, policy := e.run(t, LaunchSpec{Args: []string{"-c", "echo ${HTTPS_PROXY:-none}"}, Network: NetworkDeny})
	if policy.Network != NetworkDeny || res.ExitCode != 0 {
		t.Fatalf("deny: %#v %#v", policy, res)
	}
	// the capsule has no allowlist: allowlist is refused as deny, and said
	_, policy = e.run(t, LaunchSpec{Args: []string{"-c", "true"}, Network: NetworkAllowlist})
	if policy.Network != NetworkDeny || len(policy.Degraded) != 1 {
		t.Fatalf("allowlist without a list: %#v", policy)
	}
	// model_only for a command capsule has no agent profile for: denied, and said
	_, policy = e.run(t, LaunchSpec{Args: []string{"-c", "true"}, Network: NetworkModelOnly})
	if policy.Network != NetworkDeny || len(policy.Degraded) != 1 {
		t.Fatalf("model_only without a profile: %#v", policy)
	}
	// model_only for claude: its API hosts through the allowlist proxy
	bin := filepath.Join(e.ws, "bin") // the scratch folder's other entries are hidden siblings
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "claude"), []byte("#!/bin/sh\necho proxy=$HTTPS_PROXY\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, policy = e.run(t, LaunchSpec{Command: filepath.Join(bin, "claude"), Network: NetworkModelOnly})
	if policy.Network != NetworkModelOnly || !strings.Contains(res.Stdout, "proxy=http://127.0.0.1:3128") {
		t.Fatalf("model_only: %#v %#v", policy, res)
	}
}

func TestCapsuleResources(t *testing.T) {
	t.Parallel()
	e := newCapsuleEnv(t)
	caps := requireOS(t, e.rt)
	res, policy := e.run(t, LaunchSpec{Args: []string{"-c", "ulimit -n"}, Resources: ResourcePolicy{FDs: 77}})
	if strings.TrimSpace(res.Stdout) != "77" || len(policy.Degraded) != 0 {
		t.Fatalf("fds: %#v %#v", res, policy)
	}
	spec := LaunchSpec{Command: "/bin/sh", Args: []string{"-c", "true"}, Dir: e.ws, Resources: ResourcePolicy{Memory: 256 << 20, PIDs: 64, CPUs: 1.5}, Degrade: DegradeFail}
	if has(caps.Features, "limit_memory") && has(caps.Features, "limit_pids") && has(caps.Features, "limit_cpus") {
		res, policy = e.run(t, spec)
		if res.ExitCode != 0 || len(policy.Degraded) != 0 {
			t.Fatalf("cgroup limits: %#v %#v", res, policy)
		}
	} else {
		// not enforceable here (no delegated cgroup): fail closed, or run degraded under warn
		if _, _, err := e.rt.Launch(context.Background(), spec); err == nil {
			t.Fatal("an unenforceable limit launched under degrade: fail")
		}
		spec.Degrade = DegradeWarn
		res, policy = e.run(t, spec)
		if res.ExitCode != 0 || len(policy.Degraded) == 0 {
			t.Fatalf("degraded limits: %#v %#v", res, policy)
		}
	}
}
