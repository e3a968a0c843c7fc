//! Home-layer paths that make programs run as the person once applied: git's
//! configuration, shell startup files, programs in the folders on `PATH`, session
//! autostart entries, and tool configuration that names commands to run. `home diff`
//! marks an added or changed entry at such a path, so that a review reads those first:
//! applying one hands the task a way to run code on the host later.

use std::path::{Component, Path};

/// Why applying an added or changed entry at `rel` (relative to the home) lets its
/// content run as the person, or `None` for an ordinary file.
pub fn runs_as_you(rel: &Path) -> Option<&'static str> {
    let parts: Vec<&[u8]> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.as_encoded_bytes()),
            _ => None,
        })
        .collect();
    let first = *parts.first()?;
    let second = parts.get(1).copied();
    match first {
        b".gitconfig" | b".gitattributes" => Some("git configuration: names programs git runs"),
        b".bashrc" | b".bash_profile" | b".bash_login" | b".bash_logout" | b".profile"
        | b".zshrc" | b".zprofile" | b".zshenv" | b".zlogin" | b".zlogout" | b".cshrc"
        | b".tcshrc" | b".kshrc" | b".mkshrc" | b".inputrc" | b".xprofile" | b".xinitrc"
        | b".xsession" | b".pam_environment" => Some("shell or session startup file"),
        b"bin" => Some("a program in a folder on PATH"),
        b".ssh" => Some("ssh configuration: can name programs ssh runs"),
        b".npmrc" | b".yarnrc" | b".yarnrc.yml" | b".pypirc" | b".vimrc" | b".exrc"
        | b".nanorc" | b".emacs" | b".tmux.conf" | b".screenrc" | b".wgetrc" | b".curlrc"
        | b".netrc" | b".pythonrc" | b".irbrc" | b".gdbinit" | b".lldbinit" | b".direnvrc"
        | b".envrc" => Some("tool configuration that can run programs"),
        b".local" if second == Some(b"bin") => Some("a program in a folder on PATH"),
        b".cargo"
            if matches!(
                second,
                Some(b"bin") | Some(b"config") | Some(b"config.toml")
            ) =>
        {
            Some("cargo's programs or configuration")
        }
        b".config" => match second? {
            b"git" => Some("git configuration: names programs git runs"),
            b"autostart" | b"systemd" | b"environment.d" => Some("runs at login"),
            b"fish" | b"nushell" | b"zsh" | b"bash" => Some("shell startup file"),
            b"nvim" | b"vim" | b"emacs" | b"direnv" | b"pip" | b"nix" | b"gh" => {
                Some("tool configuration that can run programs")
            }
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_what_runs_and_nothing_else() {
        for p in [
            ".gitconfig",
            ".config/git/config",
            ".bashrc",
            ".profile",
            ".local/bin/git",
            "bin/ls",
            ".config/autostart/x.desktop",
            ".config/systemd/user/x.service",
            ".cargo/config.toml",
            ".ssh/config",
        ] {
            assert!(runs_as_you(Path::new(p)).is_some(), "{p}");
        }
        for p in [
            "notes.txt",
            ".cache/pip/x",
            ".config/other/x",
            ".local/share/x",
            ".cargo/registry/x",
        ] {
            assert!(runs_as_you(Path::new(p)).is_none(), "{p}");
        }
    }
}
