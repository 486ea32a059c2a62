//! Writing files into folders another user can write (data directory, pgpass folder) without following links.
//!
//! Every file written for PostgreSQL is created `O_EXCL|O_NOFOLLOW` with its mode at creation, `fchown`ed on the
//! descriptor and renamed into place; emptying the data directory and handing it over follow no link either.
// When the agent runs as root with `run_as`, the postgres user (or a database superuser through
// `COPY ... TO`) can plant a symlink at the temporary name. Opening with O_CREAT|O_EXCL|O_NOFOLLOW refuses
// any existing entry, the mode is set at creation (no window with umask permissions), the owner is changed
// on the open descriptor, and rename(2) replaces the final name itself, never what it points to.
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Who should own the file once written (`None`: whoever we are).
pub(crate) type Owner = Option<(nix::unistd::Uid, nix::unistd::Gid)>;

/// Replace `path` atomically with `contents`, created with `mode` and owned by `owner`.
pub(crate) fn replace_file(
    path: &Path,
    contents: &[u8],
    mode: u32,
    owner: Owner,
) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tenure-tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = match create_new(&tmp, mode) {
        // A stale temporary (a crash mid-write) or a planted entry: remove the entry itself
        // (unlink never follows a symlink) and try once more; a second planting fails the write.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(&tmp)?;
            create_new(&tmp, mode)?
        }
        other => other?,
    };
    let written = (|| {
        // The umask may have narrowed `mode`: set it exactly, on the descriptor.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&file, Some(uid.as_raw()), Some(gid.as_raw()))?;
        }
        file.write_all(contents)
    })();
    drop(file);
    match written.and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn create_new(path: &Path, mode: u32) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

/// Empty `dir` without following any link: the directory itself is opened `O_NOFOLLOW|O_DIRECTORY` (a link
/// planted in its place fails with ELOOP or ENOTDIR, emptying nothing), and every entry below is removed
/// relative to its parent's descriptor, subdirectories opened the same way. A missing `dir` is empty.
pub(crate) fn empty_dir(dir: &Path) -> std::io::Result<()> {
    match open_dir(None, dir) {
        Ok(d) => empty_at(d),
        Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn open_dir<P: ?Sized + nix::NixPath>(
    at: Option<std::os::fd::RawFd>,
    path: &P,
) -> nix::Result<nix::dir::Dir> {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    nix::dir::Dir::openat(at, path, flags, nix::sys::stat::Mode::empty())
}

fn empty_at(mut dir: nix::dir::Dir) -> std::io::Result<()> {
    use nix::sys::stat::{fstatat, SFlag};
    use nix::unistd::{unlinkat, UnlinkatFlags};
    use std::os::fd::AsRawFd;
    // Names first: removing entries while the stream reads the directory may skip some.
    let names: Vec<std::ffi::CString> = dir
        .iter()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_owned()))
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .collect();
    let fd = dir.as_raw_fd();
    for name in names {
        let st = fstatat(
            Some(fd),
            name.as_c_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR {
            empty_at(open_dir(Some(fd), name.as_c_str())?)?;
            unlinkat(Some(fd), name.as_c_str(), UnlinkatFlags::RemoveDir)?;
        } else {
            unlinkat(Some(fd), name.as_c_str(), UnlinkatFlags::NoRemoveDir)?;
        }
    }
    Ok(())
}

/// Give `path` itself to `owner`: a link there is changed, never what it points to (`lchown`).
pub(crate) fn chown_nofollow(path: &Path, owner: Owner) -> std::io::Result<()> {
    let Some((uid, gid)) = owner else {
        return Ok(());
    };
    nix::unistd::fchownat(
        None,
        path,
        Some(uid),
        Some(gid),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_symlink_planted_at_the_temporary_name_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let (target, path) = (dir.path().join("victim"), dir.path().join("pgpass"));
        std::fs::write(&target, "precious").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("pgpass.tenure-tmp")).unwrap();
        replace_file(&path, b"secret", 0o600, None).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "secret");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    }

    /// A watcher stats the temporary name as fast as it can while the file is written over and over: no
    /// mode wider than 0600 may ever be seen (the old write-then-chmod showed 0644 under umask 022). The
    /// writes go on until the watcher has caught the temporary file 100 times (or 20 s pass): a fixed
    /// number of writes could all finish before a loaded machine first schedules the watcher.
    #[test]
    fn the_file_never_exists_with_a_wider_mode() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        let tmp = dir.path().join("pgpass.tenure-tmp");
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let seen = std::sync::Arc::new(AtomicU64::new(0));
        let watcher = {
            let (done, seen) = (done.clone(), seen.clone());
            std::thread::spawn(move || {
                let mut wide = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    if let Ok(m) = std::fs::symlink_metadata(&tmp) {
                        seen.fetch_add(1, Ordering::Relaxed);
                        if m.mode() & 0o077 != 0 && wide.len() < 5 {
                            wide.push(format!("{:o}", m.mode() & 0o777));
                        }
                    }
                }
                wide
            })
        };
        let body = vec![b'x'; 16 * 1024];
        let deadline = crate::clock::now() + std::time::Duration::from_secs(20);
        let mut writes = 0;
        while writes < 300 || (seen.load(Ordering::Relaxed) < 100 && crate::clock::now() < deadline)
        {
            replace_file(&path, &body, 0o600, None).unwrap();
            writes += 1;
        }
        done.store(true, Ordering::Relaxed);
        let wide = watcher.join().unwrap();
        let seen = seen.load(Ordering::Relaxed);
        assert!(
            seen > 0,
            "the watcher never saw the temporary file in {writes} writes"
        );
        assert!(wide.is_empty(), "seen with modes {wide:?}");
    }

    /// The data directory swapped for a link to a folder standing in for `/etc`: nothing there is removed.
    /// A link inside is removed itself, and a real subdirectory with everything in it.
    #[test]
    fn emptying_follows_no_link() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir_all(etc.join("sub")).unwrap();
        std::fs::write(etc.join("shadow"), "precious").unwrap();
        let data = dir.path().join("data");
        std::os::unix::fs::symlink(&etc, &data).unwrap();
        let e = empty_dir(&data).unwrap_err();
        let refused = [Some(nix::libc::ELOOP), Some(nix::libc::ENOTDIR)];
        assert!(refused.contains(&e.raw_os_error()), "{e}");
        assert!(etc.join("shadow").exists() && etc.join("sub").exists());
        std::fs::remove_file(&data).unwrap();
        std::fs::create_dir_all(data.join("base/1")).unwrap();
        std::fs::write(data.join("base/1/f"), "x").unwrap();
        std::os::unix::fs::symlink(&etc, data.join("pg_wal")).unwrap();
        std::os::unix::fs::symlink(&etc, data.join("base/link")).unwrap();
        empty_dir(&data).unwrap();
        assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0);
        assert!(etc.join("shadow").exists() && etc.join("sub").exists());
        empty_dir(&dir.path().join("absent")).unwrap();
    }

    /// The cloned data directory swapped for a link before it is handed over: the link's target keeps
    /// its owner (as root: the test is only meaningful where chown is allowed).
    #[test]
    fn the_ownership_hand_over_follows_no_link() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir(&etc).unwrap();
        let data = dir.path().join("data");
        std::os::unix::fs::symlink(&etc, &data).unwrap();
        let nobody = Some((
            nix::unistd::Uid::from_raw(65534),
            nix::unistd::Gid::from_raw(65534),
        ));
        chown_nofollow(&data, nobody).unwrap();
        assert_eq!(
            std::fs::metadata(&etc).unwrap().uid(),
            0,
            "the link's target was chowned"
        );
        assert_eq!(std::fs::symlink_metadata(&data).unwrap().uid(), 65534);
    }
}
