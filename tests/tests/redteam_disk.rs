//! Red team: no single call takes the disk below the reserve, whatever way it takes
//! space, and a filesystem full of empty files or one mounted below a writable path is
//! guarded too. On a small ext4 made for the test (a 256 MiB image on a loop device,
//! 20,000 inodes: its reserve is 5% of its size and of its inodes; ext4 because its
//! `fallocate` takes 150 MiB in a millisecond, where a tmpfs zeroes pages long enough for
//! the poll to see it) holding the capsule root, each attack is run twice in the same
//! test:
//!
//! - **calibration**: on the host, with no sandbox, as the runner: it takes the
//!   filesystem below its reserve (so the attack is real);
//! - **under capsule**: the same program in the capsule's workspace: the filesystem keeps
//!   its reserve (the call is refused, the writer stopped, or the tree killed).
//!
//! The attacks: `fallocate` of more than the headroom (mode 0, and `FALLOC_FL_KEEP_SIZE`,
//! which `RLIMIT_FSIZE` does not see); two `fallocate`s each within the headroom but not
//! together (the second comes before any poll); one `write` of more than the headroom;
//! `copy_file_range` of a sparse file made dense, twice; a sparse file mapped and its
//! pages filled, twice (no system call at all); empty files until the inodes run out;
//! and a `dd` loop into a filesystem mounted below an `--allow-write` path.
//!
//! Root only (mounting); the unprivileged runner gets the filesystems handed over.

use capsule_e2e::faults::*;
use capsule_e2e::*;
use std::path::{Path, PathBuf};

const INODES: u64 = 20_000;

/// The attacks, one program: `attack.py MODE DIR BYTES`.
const ATTACK: &str = r#"
import ctypes, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
mode, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def fa(name, flags, size):
    fd = os.open(os.path.join(d, name), os.O_RDWR | os.O_CREAT, 0o644)
    r = libc.fallocate(fd, flags, 0, size)
    e = ctypes.get_errno()
    os.close(fd)
    print(name, "rc", r, "errno", e, flush=True)
if mode == "fallocate":
    fa("fa", 0, n)
elif mode == "keepsize":
    fa("fa", 1, n)
elif mode == "twice":
    fa("fa1", 0, n); fa("fa2", 0, n)
elif mode == "write":
    fd = os.open(os.path.join(d, "w"), os.O_WRONLY | os.O_CREAT, 0o644)
    print("wrote", os.write(fd, bytes(n)), flush=True)
elif mode == "copy":
    src = os.open(os.path.join(d, "sparse"), os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(src, n)
    for name in ("c1", "c2"):
        dst = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            print(name, "copied", os.copy_file_range(src, dst, n, 0), flush=True)
        except OSError as e:
            print(name, "refused", e.errno, flush=True)
elif mode == "mmap":
    chunk = b"\1" * (1 << 20)
    for name in ("m1", "m2"):
        fd = os.open(os.path.join(d, name), os.O_RDWR | os.O_CREAT, 0o644)
        os.ftruncate(fd, n)
        m = mmap.mmap(fd, n)
        for off in range(0, n - len(chunk) + 1, len(chunk)):
            m[off:off + len(chunk)] = chunk
        print(name, "filled", flush=True)
elif mode == "inodes":
    os.makedirs(os.path.join(d, "many"), exist_ok=True)
    i = 0
    try:
        while True:
            os.close(os.open(os.path.join(d, "many", str(i)), os.O_WRONLY | os.O_CREAT, 0o644))
            i += 1
    except OSError as e:
        print("made", i, "errno", e.errno, flush=True)
"#;

fn is_root() -> bool {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() == 0 }
}

fn statvfs(p: &Path) -> libc::statvfs {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: statvfs into a zeroed struct.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c.as_ptr(), &mut st), 0);
        st
    }
}

fn free_inodes(p: &Path) -> u64 {
    statvfs(p).f_favail
}

/// An ext4 of 256 MiB and [`INODES`] inodes (no blocks reserved for root) on a loop
/// device at `dir`, its image next to it, handed to `r`; `None` where no loop device can
/// be had (said on stderr).
fn small_ext4(dir: &Path, r: &Runner) -> Option<SmallFs> {
    std::fs::create_dir_all(dir).unwrap();
    let img = dir.with_extension("img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(256 << 20)
        .unwrap();
    let o = run(std::process::Command::new("mkfs.ext4")
        .args(["-q", "-m", "0", "-N", &INODES.to_string()])
        .arg(&img));
    assert_ok(&o, "mkfs.ext4");
    let o = run(std::process::Command::new("mount")
        .args(["-o", "loop"])
        .arg(&img)
        .arg(dir));
    if !o.status.success() {
        eprintln!("skipped: no loop device here: {}", stderr(&o));
        return None;
    }
    r.own(dir);
    Some(SmallFs(dir.to_path_buf()))
}

/// The reserve capsule keeps on the filesystem of `p`: (bytes, inodes), 5% of each.
fn reserves(p: &Path) -> (u64, u64) {
    let st = statvfs(p);
    ((st.f_blocks * st.f_frsize) / 100 * 5, st.f_files / 100 * 5)
}

/// A tmpfs of `size` and `inodes` at `dir`, handed to `r`.
fn small_tmpfs(dir: &Path, size: &str, inodes: u64, r: &Runner) -> SmallFs {
    std::fs::create_dir_all(dir).unwrap();
    let o = run(std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o"])
        .arg(format!("size={size},nr_inodes={inodes},mode=0755"))
        .arg("capsule-e2e-disk")
        .arg(dir));
    assert_ok(&o, "mount a small tmpfs");
    r.own(dir);
    SmallFs(dir.to_path_buf())
}

/// Remove what an attack left in `dir` (as root).
fn clean(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        if [
            "fa", "fa1", "fa2", "w", "sparse", "c1", "c2", "m1", "m2", "many", "fill",
        ]
        .iter()
        .any(|p| n == *p || n.starts_with("fill"))
        {
            let _ = std::fs::remove_dir_all(e.path());
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The size an attack asks for, from the free space of `fs` now.
fn size_for(mode: &str, fs: &Path) -> u64 {
    let free = free(fs);
    let reserve = reserves(fs).0;
    let headroom = free.saturating_sub(reserve);
    match mode {
        // one call of more than the headroom
        "fallocate" | "keepsize" | "write" => free - reserve / 2,
        // two, each within the headroom, not together (but within the free space)
        _ => (headroom / 2 + reserve / 4) & !0xfffff,
    }
}

#[test]
fn no_single_call_takes_the_disk_below_the_reserve() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    for r in runners() {
        let label = r.label().to_string();
        let t = scratch();
        let src = t.path().join("src");
        git_repo(&src, &[("README", "r\n")]);
        r.own(&src);
        let Some(fs) = small_ext4(&t.path().join("fs"), &r) else {
            return;
        };
        let (reserve, ireserve) = reserves(&fs.0);
        let root = fs.0.join("root");
        assert_ok(
            &bounded(
                r.capsule(&root)
                    .args(["open", "--name", "g", "--source"])
                    .arg(&src),
                60,
            ),
            "open",
        );
        let ws = root.join("workspaces/g");
        let cal = fs.0.join("calibration");
        std::fs::create_dir_all(&cal).unwrap();
        r.own(&cal);
        let script = t.path().join("attack.py");
        std::fs::write(&script, ATTACK).unwrap();
        let python = Path::new("/usr/bin/python3");
        for mode in [
            "fallocate",
            "keepsize",
            "twice",
            "write",
            "copy",
            "mmap",
            "inodes",
        ] {
            // calibration: no sandbox, the same program, the same filesystem
            let n = size_for(mode, &fs.0);
            let o = bounded(
                r.command(python, &root).arg(&script).args([
                    mode,
                    cal.to_str().unwrap(),
                    &n.to_string(),
                ]),
                60,
            );
            let (left, ileft) = (free(&fs.0), free_inodes(&fs.0));
            assert!(
                left < reserve || ileft < ireserve,
                "[{label}] calibration of {mode}: {left} bytes and {ileft} inodes free (reserve {reserve}, {ireserve}): {} {}",
                stdout(&o),
                stderr(&o)
            );
            clean(&cal);
            // under capsule
            let n = size_for(mode, &fs.0);
            let o = bounded(
                r.capsule(&root).args([
                    "exec",
                    "g",
                    "--",
                    "python3",
                    "-c",
                    ATTACK,
                    mode,
                    ".",
                    &n.to_string(),
                ]),
                60,
            );
            let (left, ileft) = (free(&fs.0), free_inodes(&fs.0));
            eprintln!(
                "[{label}] {mode}: {left} bytes, {ileft} inodes free; exit {}; {} {}",
                code(&o),
                stdout(&o).trim(),
                stderr(&o).trim()
            );
            assert!(
                left >= reserve,
                "[{label}] {mode}: {left} bytes free, reserve {reserve}: {} {}",
                stdout(&o),
                stderr(&o)
            );
            assert!(
                ileft >= ireserve,
                "[{label}] {mode}: {ileft} inodes free, reserve {ireserve}: {}",
                stderr(&o)
            );
            clean(&ws);
        }
        // a filesystem mounted below an --allow-write path
        let extra = fs.0.join("extra");
        std::fs::create_dir_all(&extra).unwrap();
        r.own(&extra);
        let sub = small_tmpfs(&extra.join("sub"), "64m", 10_000, &r);
        let sub_reserve = (64u64 << 20) / 100 * 5;
        let fill = format!(
            "i=0; while :; do dd if=/dev/zero of={}/fill$i bs=4M count=1 2>/dev/null || exit 3; i=$((i+1)); done",
            sub.0.display()
        );
        let o = bounded(std::process::Command::new("sh").arg("-c").arg(&fill), 60);
        assert!(
            free(&sub.0) < sub_reserve,
            "[{label}] calibration of the submount: {} free: {}",
            free(&sub.0),
            stderr(&o)
        );
        clean(&sub.0);
        let o = bounded(
            r.capsule(&root)
                .args(["exec", "g", "--allow-write"])
                .arg(&extra)
                .args(["--", "sh", "-c", &fill]),
            60,
        );
        let left = free(&sub.0);
        eprintln!(
            "[{label}] submount: {left} bytes free; {}",
            stderr(&o).trim()
        );
        assert_eq!(code(&o), 137, "[{label}] submount: {}", stderr(&o));
        assert!(
            left >= sub_reserve,
            "[{label}] submount: {left} bytes free, reserve {sub_reserve}"
        );
        drop(sub);
        assert_ok(
            &bounded(r.capsule(&root).args(["close", "g", "--force"]), 60),
            "close",
        );
        drop(fs);
        assert_nothing_runs(t.path(), 15, &label);
    }
}

/// The exec record says what bounded the single calls: the budget in force as
/// `RLIMIT_FSIZE`, and a refused `fallocate` as a refusal naming the grant.
#[test]
fn the_record_says_what_bounded_the_calls() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let r = Runner::Current;
    let t = scratch();
    let src = t.path().join("src");
    git_repo(&src, &[("README", "r\n")]);
    let Some(fs) = small_ext4(&t.path().join("fs"), &r) else {
        return;
    };
    let root: PathBuf = fs.0.join("root");
    assert_ok(
        &bounded(
            r.capsule(&root)
                .args(["open", "--name", "g", "--source"])
                .arg(&src),
            60,
        ),
        "open",
    );
    let n = size_for("keepsize", &fs.0);
    let o = bounded(
        r.capsule(&root).args([
            "exec",
            "g",
            "--json",
            "--",
            "python3",
            "-c",
            ATTACK,
            "keepsize",
            ".",
            &n.to_string(),
        ]),
        60,
    );
    let rec: serde_json::Value = serde_json::from_str(
        stdout(&o)
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .unwrap_or("{}"),
    )
    .unwrap();
    let budget = rec["limits"]["in_force"]["disk_budget"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        budget > 0 && budget < 256 << 20,
        "no budget in the record: {rec}"
    );
    assert!(
        rec["limits"]["rlimits"]
            .to_string()
            .contains("the disk guard's budget"),
        "{rec}"
    );
    let refusals = rec["refusals"].to_string();
    assert!(
        refusals.contains("fallocate of") && refusals.contains("disk_reserve"),
        "no refusal of the fallocate: {rec}"
    );
    assert!(stdout(&o).contains("errno 28"), "{}", stdout(&o));
    assert_ok(
        &bounded(r.capsule(&root).args(["close", "g", "--force"]), 60),
        "close",
    );
}
