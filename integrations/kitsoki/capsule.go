//go:build !windows

// Package agentruntime: the capsule backend of Kitsoki's agent runtime.
//
// Capsule runs a LaunchSpec through `capsule exec` inside an opened capsule, so that
// `min_strength: os_confined` is enforced by the operating system (Linux namespaces,
// Landlock, seccomp) rather than recorded. This file compiles together with Kitsoki's
// own package (types.go, supervised.go, ...), which it does not change.
//
// How a LaunchSpec maps onto `capsule exec` (see launchArgs):
//
//   - Dir must lie inside an opened capsule's workspace (`capsule list --json`); else the
//     launch fails before anything starts (fail closed). The command runs there.
//   - Repo read_only: `--read-only-workspace` (the workspace and its .git read-only).
//   - RW: relative paths resolve against Dir. Inside the workspace a path is writable
//     anyway unless Repo is read_only; then it is passed as `--allow-write` (missing
//     folders are made first, refusing symlinks on the way). Outside the workspace it
//     must exist and is passed as `--allow-write`. An RW path at or below a Hidden path
//     is dropped: hidden beats rw.
//   - Hidden: relative paths resolve against Dir; each is `--hide`.
//   - Network: deny -> `--no-network`; model_only -> the API hosts of capsule's agent
//     profile named like the command (claude, codex, ...) through the allowlist proxy
//     (`--allow-host`; no profile: denied, and said in Degraded); allowlist -> the
//     capsule's own list (denied, and said, when the capsule has none); inherit -> the
//     capsule's own mode.
//   - Resources: `--timeout`, `--activity-timeout` (enforced here instead when
//     SemanticActivity asks to ignore thinking-token events), `--memory`, `--cpus`,
//     `--pids`, `--file-size`, `--fds`. A limit this machine cannot enforce fails the
//     launch under degrade: fail and is dropped (and listed in Degraded) under warn.
//   - Env: passed as given (TMPDIR excepted: the sandbox's own /tmp) through a pipe
//     (`--env-file /dev/fd/N`), never on a command line. The host environment of the
//     caller does not reach the command otherwise (capsule's clean environment).
//   - Stdin: the command's stdin. Stdout and stderr are collected as they stream.
//   - Cancel: capsule runs in a process group of its own; cancelling kills the group
//     (capsule's sandbox dies with it: everything the command started ends).
//   - Result.FinalDiff: `git diff` of RepoRoot run by `capsule exec` in the same capsule
//     (read-only workspace, no network): the workspace's git configuration, attributes
//     and drivers run inside the sandbox, never on the host.
package agentruntime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CapsuleOptions configures the capsule backend.
type CapsuleOptions struct {
	// Binary is the capsule executable; empty: `capsule` on PATH.
	Binary string
}

// Capsule is the agent runtime backed by `capsule exec`.
type Capsule struct {
	bin string
	// env is capsule's own environment (nil: this process's); tests set a scratch root
	env []string
}

// NewCapsule returns the capsule backend.
func NewCapsule(opts CapsuleOptions) *Capsule {
	bin := opts.Binary
	if bin == "" {
		bin = "capsule"
	}
	return &Capsule{bin: bin}
}

func (c *Capsule) Name() string { return "capsule" }

// capsuleIsolation is the part of `capsule isolation --json` the backend reads.
type capsuleIsolation struct {
	Full        bool    `json:"full"`
	ExecRefused *string `json:"exec_refused"`
	ExecLevel   *struct {
		Level string `json:"level"`
	} `json:"exec_level"`
	Report struct {
		Landlock struct {
			ABI int `json:"abi"`
		} `json:"landlock"`
		Seccomp struct {
			Available bool `json:"available"`
		} `json:"seccomp"`
		UserNamespaces struct {
			Available bool `json:"available"`
		} `json:"user_namespaces"`
	} `json:"report"`
	Limits map[string]struct {
		Enforced bool   `json:"enforced"`
		By       string `json:"by"`
		Why      string `json:"why"`
	} `json:"limits"`
}

func (c *Capsule) isolation(ctx context.Context) (*capsuleIsolation, error) {
	out, err := c.output(ctx, "isolation", "--json")
	if err != nil {
		return nil, err
	}
	var iso capsuleIsolation
	if err := json.Unmarshal(out, &iso); err != nil {
		return nil, fmt.Errorf("capsule isolation --json: %w", err)
	}
	return &iso, nil
}

// output runs capsule with args (no stdin) and returns its stdout.
func (c *Capsule) output(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v: %s", c.bin, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func strengthOf(iso *capsuleIsolation) Strength {
	if iso == nil || iso.ExecRefused != nil || iso.ExecLevel == nil {
		return StrengthNone
	}
	switch iso.ExecLevel.Level {
	case "full":
		return StrengthOSConfined
	case "weaker":
		return StrengthFSConfined
	default:
		return StrengthNone
	}
}

// Probe asks `capsule isolation --json`: os_confined with full isolation, fs_confined
// under accepted weaker isolation, none when capsule cannot run.
func (c *Capsule) Probe(ctx context.Context) Capabilities {
	iso, err := c.isolation(ctx)
	st := strengthOf(iso)
	caps := Capabilities{Backend: c.Name(), Strength: st}
	if err != nil || st == StrengthNone {
		return caps
	}
	f := []string{"process_tree_kill", "timeout_cancel", "env_clean", "home_layer", "final_diff", "fs_rw", "fs_hidden", "repo_read_only"}
	if iso.Report.UserNamespaces.Available && st == StrengthOSConfined {
		f = append(f, "namespaces", "network_deny", "network_allowlist")
	}
	if iso.Report.Landlock.ABI > 0 {
		f = append(f, "landlock")
	}
	if iso.Report.Seccomp.Available {
		f = append(f, "seccomp")
	}
	for _, name := range sortedKeys(iso.Limits) {
		if iso.Limits[name].Enforced {
			f = append(f, "limit_"+name)
		}
	}
	f = append(f, "refusals_logged")
	caps.Features = f
	return caps
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// listedCapsule is one entry of `capsule list --json`.
type listedCapsule struct {
	Name      string `json:"name"`
	Workspace string `json:"workspace"`
	Network   string `json:"network"`
}

// capsuleFor finds the opened capsule whose workspace holds dir (the deepest).
func (c *Capsule) capsuleFor(ctx context.Context, dir string) (*listedCapsule, error) {
	out, err := c.output(ctx, "list", "--json")
	if err != nil {
		return nil, err
	}
	var l struct {
		Capsules []listedCapsule `json:"capsules"`
	}
	if err := json.Unmarshal(out, &l); err != nil {
		return nil, fmt.Errorf("capsule list --json: %w", err)
	}
	var best *listedCapsule
	for i := range l.Capsules {
		cp := &l.Capsules[i]
		if cp.Workspace != "" && pathContains(cp.Workspace, dir) {
			if best == nil || len(cp.Workspace) > len(best.Workspace) {
				best = cp
			}
		}
	}
	if best == nil {
		return nil, fmt.Errorf("agentruntime capsule: %s is not inside an opened capsule (capsule open ... first); nothing started", dir)
	}
	return best, nil
}

// modelHosts are the API hosts of the agent named like the command's base name, from
// capsule's agent profile (`capsule agent profile show NAME --json`); none when capsule
// has no such profile.
func (c *Capsule) modelHosts(ctx context.Context, command string) []string {
	out, err := c.output(ctx, "agent", "profile", "show", filepath.Base(command), "--json")
	if err != nil {
		return nil
	}
	var p struct {
		Hosts []string `json:"hosts"`
	}
	if json.Unmarshal(out, &p) != nil {
		return nil
	}
	return p.Hosts
}

// plan is what Launch decided before anything runs.
type plan struct {
	capsule    *listedCapsule
	dir        string
	args       []string
	env        []byte
	policy     AppliedPolicy
	goActivity time.Duration // activity timeout enforced here (SemanticActivity)
	strength   Strength
}

func abs(base, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Clean(filepath.Join(base, p))
}

// realDir resolves dir's symlinks once: capsule compares canonical paths.
func realDir(dir string) (string, error) {
	if strings.TrimSpace(dir) == "" {
		return "", errors.New("agentruntime capsule: Dir is required (a folder inside an opened capsule)")
	}
	a, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	r, err := filepath.EvalSymlinks(a)
	if err != nil {
		return "", fmt.Errorf("agentruntime capsule: Dir %s: %w", dir, err)
	}
	return r, nil
}

// ensureInside makes sure target (inside root) has no symlink on its way from root,
// making the missing folders when mkdir; it returns an error naming the first symlink or
// non-folder met.
func ensureInside(root, target string, mkdir bool) error {
	rel, err := filepath.Rel(root, target)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%s is outside %s", target, root)
	}
	at := root
	if rel == "." {
		return nil
	}
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		at = filepath.Join(at, part)
		fi, err := os.Lstat(at)
		switch {
		case err == nil && fi.Mode()&os.ModeSymlink != 0:
			return fmt.Errorf("%s is a symlink (written in the workspace): refused", at)
		case err == nil && !fi.IsDir():
			return fmt.Errorf("%s is not a folder", at)
		case err == nil:
		case os.IsNotExist(err) && mkdir:
			if err := os.Mkdir(at, 0o755); err != nil && !os.IsExist(err) {
				return err
			}
			if fi, err := os.Lstat(at); err != nil || !fi.IsDir() {
				return fmt.Errorf("%s: not a folder after mkdir", at)
			}
		default:
			return err
		}
	}
	return nil
}

func (c *Capsule) decide(ctx context.Context, spec LaunchSpec) (*plan, error) {
	if strings.TrimSpace(spec.Command) == "" {
		return nil, errors.New("agentruntime capsule: command is required")
	}
	iso, err := c.isolation(ctx)
	if err != nil {
		return nil, fmt.Errorf("agentruntime capsule: capsule cannot run: %w", err)
	}
	st := strengthOf(iso)
	if st == StrengthNone {
		why := "no isolation level"
		if iso.ExecRefused != nil {
			why = *iso.ExecRefused
		}
		return nil, fmt.Errorf("agentruntime capsule: capsule refuses to run commands here: %s", why)
	}
	degrade := spec.EffectiveDegrade()
	var degraded []string
	gap := func(msg string) error {
		if degrade == DegradeFail {
			return fmt.Errorf("agentruntime capsule: %s (degrade: fail); nothing started", msg)
		}
		degraded = append(degraded, msg)
		return nil
	}
	min := spec.EffectiveMin()
	if !st.Satisfies(min) {
		if err := gap(fmt.Sprintf("capsule strength %s below min_strength %s", st, min)); err != nil {
			return nil, err
		}
	}
	dir, err := realDir(spec.Dir)
	if err != nil {
		return nil, err
	}
	cp, err := c.capsuleFor(ctx, dir)
	if err != nil {
		return nil, err
	}
	ws := cp.Workspace
	args := []string{"exec", ws}
	p := AppliedPolicy{
		Backend:     c.Name(),
		Strength:    st,
		MinStrength: min,
		Repo:        spec.EffectiveRepo(),
		Degrade:     degrade,
	}
	readOnly := spec.EffectiveRepo() == RepoReadOnly
	if readOnly {
		args = append(args, "--read-only-workspace")
	}
	var hidden []string
	for _, h := range spec.Hidden {
		if strings.TrimSpace(h) == "" {
			return nil, errors.New("agentruntime capsule: an empty hidden path")
		}
		a := abs(dir, h)
		if r, err := filepath.EvalSymlinks(a); err == nil {
			a = r
		}
		hidden = append(hidden, a)
		args = append(args, "--hide", a)
	}
	p.Hidden = hidden
	for _, w := range spec.RW {
		if strings.TrimSpace(w) == "" {
			return nil, errors.New("agentruntime capsule: an empty rw path")
		}
		a := abs(dir, w)
		shadowed := false
		for _, h := range hidden {
			if pathContains(h, a) {
				shadowed = true
			}
		}
		if shadowed {
			continue // hidden beats rw
		}
		if pathContains(ws, a) {
			if err := ensureInside(ws, a, readOnly); err != nil {
				return nil, fmt.Errorf("agentruntime capsule: rw %s: %w", w, err)
			}
			if readOnly {
				args = append(args, "--allow-write", a)
			}
		} else {
			r, err := filepath.EvalSymlinks(a)
			if err != nil {
				return nil, fmt.Errorf("agentruntime capsule: rw %s: %w", w, err)
			}
			for _, h := range hidden {
				if pathContains(h, r) {
					shadowed = true
				}
			}
			if shadowed {
				continue
			}
			a = r
			args = append(args, "--allow-write", a)
		}
		p.RW = append(p.RW, a)
	}
	// network
	net := spec.EffectiveNetwork()
	switch net {
	case NetworkDeny:
		args = append(args, "--no-network")
	case NetworkModelOnly:
		hosts := c.modelHosts(ctx, spec.Command)
		if len(hosts) == 0 {
			args = append(args, "--no-network")
			degraded = append(degraded, fmt.Sprintf("network model_only: no known API hosts for %s; network denied instead", filepath.Base(spec.Command)))
			net = NetworkDeny
		}
		for _, h := range hosts {
			args = append(args, "--allow-host", h)
		}
	case NetworkAllowlist:
		if cp.Network != "allowlist" {
			args = append(args, "--no-network")
			degraded = append(degraded, fmt.Sprintf("network allowlist: capsule %s has no allowlist (its network is %s); network denied instead", cp.Name, cp.Network))
			net = NetworkDeny
		}
	case NetworkInherit:
	default:
		return nil, fmt.Errorf("agentruntime capsule: unknown network policy %q", net)
	}
	p.Network = net
	// resources
	r := spec.Resources
	limit := func(name, flag, value string, set bool) error {
		if !set {
			return nil
		}
		if l, ok := iso.Limits[name]; ok && !l.Enforced {
			return gap(fmt.Sprintf("resource %s cannot be enforced here: %s", name, l.Why))
		}
		args = append(args, flag, value)
		return nil
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }
	if r.Timeout > 0 {
		args = append(args, "--timeout", ms(r.Timeout))
	}
	var goActivity time.Duration
	if r.ActivityTimeout > 0 && spec.SemanticActivity {
		goActivity = r.ActivityTimeout
	} else if err := limit("activity_timeout", "--activity-timeout", ms(r.ActivityTimeout), r.ActivityTimeout > 0); err != nil {
		return nil, err
	}
	checks := []struct {
		name, flag, value string
		set               bool
	}{
		{"memory", "--memory", strconv.FormatInt(r.Memory, 10), r.Memory > 0},
		{"cpus", "--cpus", strconv.FormatFloat(r.CPUs, 'f', -1, 64), r.CPUs > 0},
		{"pids", "--pids", strconv.Itoa(r.PIDs), r.PIDs > 0},
		{"file_size", "--file-size", strconv.FormatInt(r.FileSize, 10), r.FileSize > 0},
		{"fds", "--fds", strconv.Itoa(r.FDs), r.FDs > 0},
	}
	for _, l := range checks {
		if err := limit(l.name, l.flag, l.value, l.set); err != nil {
			return nil, err
		}
	}
	// environment: through a pipe, NUL-separated
	var env bytes.Buffer
	for _, kv := range spec.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || k == "TMPDIR" || strings.ContainsRune(kv, 0) {
			continue
		}
		env.WriteString(kv)
		env.WriteByte(0)
	}
	// fd 3: the exec record; fd 4: the environment (cmd.ExtraFiles)
	args = append(args, "--record-to", "/dev/fd/3", "--env-file", "/dev/fd/4", "--")
	args = append(args, spec.Command)
	args = append(args, spec.Args...)
	p.Degraded = degraded
	return &plan{capsule: cp, dir: dir, args: args, env: env.Bytes(), policy: p, goActivity: goActivity, strength: st}, nil
}

// execRecord is the part of capsule's exec record the backend reads.
type execRecord struct {
	ExitStatus  int `json:"exit_status"`
	Termination *struct {
		Kind  string `json:"kind"`
		Value int    `json:"value"`
	} `json:"termination"`
	Degradation   []string `json:"degradation"`
	LimitsReached []string `json:"limits_reached"`
	Error         *string  `json:"error"`
}

// Launch runs spec through `capsule exec` (see the package comment for the mapping).
func (c *Capsule) Launch(ctx context.Context, spec LaunchSpec) (*Running, AppliedPolicy, error) {
	pl, err := c.decide(ctx, spec)
	if err != nil {
		return nil, AppliedPolicy{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	cmd := exec.Command(c.bin, pl.args...)
	cmd.Dir = pl.dir
	cmd.Env = c.env
	cmd.Stdin = spec.Stdin
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	recR, recW, err := os.Pipe()
	if err != nil {
		cancel()
		return nil, AppliedPolicy{}, fmt.Errorf("agentruntime capsule: pipe: %w", err)
	}
	envR, envW, err := os.Pipe()
	if err != nil {
		cancel()
		recR.Close()
		recW.Close()
		return nil, AppliedPolicy{}, fmt.Errorf("agentruntime capsule: pipe: %w", err)
	}
	cmd.ExtraFiles = []*os.File{recW, envR}
	activity := &activitySignal{}
	activity.touch()
	var stdout, stderr activityBuffer
	stdout.activity = activity
	stdout.semantic = spec.SemanticActivity
	stderr.activity = activity
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		cancel()
		for _, f := range []*os.File{recR, recW, envR, envW} {
			f.Close()
		}
		return nil, AppliedPolicy{}, fmt.Errorf("agentruntime capsule: start %s: %w", c.bin, err)
	}
	recW.Close()
	envR.Close()
	go func() {
		_, _ = envW.Write(pl.env)
		envW.Close()
	}()
	recC := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(recR, 16<<20))
		recR.Close()
		recC <- b
	}()
	kill := func() {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Process.Kill()
		}
	}
	policy := pl.policy
	wait := func(waitCtx context.Context) (Result, error) {
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var activityC <-chan time.Time
		if pl.goActivity > 0 {
			interval := pl.goActivity / 4
			if interval < time.Millisecond {
				interval = time.Millisecond
			}
			t := time.NewTicker(interval)
			defer t.Stop()
			activityC = t.C
		}
		var waitErr error
		killReason := ""
	loop:
		for {
			select {
			case waitErr = <-done:
				break loop
			case <-activityC:
				last := activity.last.Load()
				if last != 0 && time.Since(time.Unix(0, last)) < pl.goActivity {
					continue
				}
				killReason = "activity_timeout"
				kill()
				waitErr = <-done
				break loop
			case <-waitCtx.Done():
				killReason = "cancelled"
				kill()
				waitErr = <-done
				break loop
			case <-runCtx.Done():
				killReason = "cancelled"
				kill()
				waitErr = <-done
				break loop
			}
		}
		var rec *execRecord
		if killReason == "" {
			if b := <-recC; len(bytes.TrimSpace(b)) > 0 {
				var r execRecord
				if json.Unmarshal(b, &r) == nil {
					rec = &r
				}
			}
		}
		exitCode := 0
		if waitErr != nil {
			var ee *exec.ExitError
			if !errors.As(waitErr, &ee) {
				return Result{}, waitErr
			}
			exitCode = ee.ExitCode()
			if exitCode < 0 {
				exitCode = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
			}
		}
		res := Result{
			Stdout:   stdout.String(),
			Stderr:   stderr.String(),
			ExitCode: exitCode,
			Duration: time.Since(start),
		}
		if killReason != "" {
			res.Killed = true
			res.KillReason = killReason
		} else if rec != nil && rec.Termination != nil {
			switch rec.Termination.Kind {
			case "timed_out":
				res.Killed, res.KillReason = true, "timeout"
			case "activity_timeout":
				res.Killed, res.KillReason = true, "activity_timeout"
			case "signaled":
				for _, m := range rec.LimitsReached {
					if strings.HasPrefix(m, "killed:") {
						res.Killed, res.KillReason = true, "limit: "+strings.TrimSpace(strings.TrimPrefix(m, "killed:"))
					}
				}
			}
		} else if rec == nil && exitCode == 125 {
			res.Stderr += "agentruntime capsule: the sandbox could not be set up; nothing ran\n"
		}
		if rec != nil {
			for _, d := range rec.Degradation {
				res.Stderr += "agentruntime capsule: degraded: " + d + "\n"
			}
		}
		if strings.TrimSpace(spec.RepoRoot) != "" && killReason != "cancelled" {
			res.FinalDiff = c.finalDiff(waitCtx, pl, spec.RepoRoot)
		}
		return res, nil
	}
	return NewRunning(policy, wait), policy, nil
}

// finalDiff is `git diff` of repo, run by capsule in the capsule's sandbox (read-only
// workspace, no network): the workspace's git config, attributes and drivers never run
// on the host. Empty when repo is not in the capsule or git fails.
func (c *Capsule) finalDiff(ctx context.Context, pl *plan, repo string) string {
	r, err := realDir(repo)
	if err != nil || !pathContains(pl.capsule.Workspace, r) {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, "exec", pl.capsule.Workspace, "--read-only-workspace", "--no-network", "--timeout", "60s", "--",
		"git", "--no-pager", "diff", "--no-ext-diff", "--no-textconv", "--no-color", "--")
	cmd.Dir = r
	cmd.Env = c.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return ""
	}
	return out.String()
}
