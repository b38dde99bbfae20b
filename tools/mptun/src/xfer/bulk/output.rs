//! Where `serve --output-dir` stores the files clients send. Nothing
//! authenticates a client, so what it may do is bounded here: it names a
//! file only within the one directory the server was started with (opened
//! once, so a path swapped for a symlink later leads nowhere else), it
//! only ever creates a new file (an existing name, a planted symlink or
//! hard link is refused, never replaced or written through), and it may
//! not send more than `--max-file-size` or than the directory's file
//! system has free. Every refusal says why, for the client to print.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};

/// The directory files are stored in, held open.
pub(crate) struct OutputDir {
    fd: OwnedFd,
    path: PathBuf,
    max_file_size: Option<u64>,
}

impl OutputDir {
    /// Opens `path` as the directory every file will be created in,
    /// whatever its path names afterwards (a symlink given here is
    /// followed now, once).
    pub(crate) fn open(path: &Path, max_file_size: Option<u64>) -> Result<OutputDir> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| anyhow!("--output-dir {}: not a directory (a NUL in the path)", path.display()))?;
        // SAFETY: a NUL-terminated path; the result is checked.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            bail!("--output-dir {}: not a directory ({})", path.display(), io::Error::last_os_error());
        }
        // SAFETY: a descriptor just opened and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(OutputDir { fd, path: path.to_owned(), max_file_size })
    }

    /// Creates the new file `name` (a base name, checked by the request)
    /// for `len` bytes, or says why not: over the limit, more than is
    /// free, or the name taken by anything at all.
    pub(crate) fn create(&self, name: &str, len: u64) -> Result<(File, PathBuf)> {
        fits(len, self.max_file_size, self.free_bytes()?)?;
        let c = CString::new(name).map_err(|_| anyhow!("unsafe file name {name:?}"))?;
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a directory descriptor we hold and a NUL-terminated name;
        // the mode is what `File::create` gives (less the umask).
        let fd = unsafe { libc::openat(self.fd.as_raw_fd(), c.as_ptr(), flags, 0o666 as libc::c_uint) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::AlreadyExists {
                bail!("{name} already exists in the server's output directory, which only takes new files");
            }
            bail!("cannot create {name} in the server's output directory: {e}");
        }
        // SAFETY: a descriptor just opened and owned by nothing else.
        Ok((File::from(unsafe { OwnedFd::from_raw_fd(fd) }), self.path.join(name)))
    }

    /// Bytes an unprivileged writer may still use on the directory's file
    /// system (what is reserved for root stays free for the host).
    fn free_bytes(&self) -> Result<u64> {
        // SAFETY: fstatvfs fills the struct it is given.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a descriptor we hold, a pointer to a live statvfs.
        if unsafe { libc::fstatvfs(self.fd.as_raw_fd(), &mut st) } != 0 {
            bail!("cannot tell the output directory's free space: {}", io::Error::last_os_error());
        }
        Ok(st.f_bavail.saturating_mul(st.f_frsize))
    }
}

/// Whether a file of `len` bytes may be stored under a limit of `max`
/// with `free` bytes free; the refusal names what it is over.
fn fits(len: u64, max: Option<u64>, free: u64) -> Result<()> {
    if let Some(max) = max.filter(|&m| len > m) {
        bail!("the file's {len} bytes are more than the server's --max-file-size of {max} bytes");
    }
    if len > free {
        bail!("the file's {len} bytes do not fit in the {free} bytes free in the server's output directory");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A directory of this test's own, removed (links, not their targets)
    /// at the end.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let p = std::env::temp_dir().join(format!("mptun-output-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(p.join("out")).unwrap();
            Scratch(p)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn refusal(r: Result<(File, PathBuf)>) -> String {
        format!("{:#}", r.expect_err("refused"))
    }

    #[test]
    fn only_new_files_are_created_and_nothing_is_written_through_a_link() {
        let s = Scratch::new("new");
        let out = s.0.join("out");
        let dir = OutputDir::open(&out, None).unwrap();
        std::fs::write(out.join("taken"), b"mine").unwrap();
        std::fs::write(s.0.join("target"), b"outside").unwrap();
        std::os::unix::fs::symlink(s.0.join("target"), out.join("link")).unwrap();
        std::os::unix::fs::symlink(s.0.join("absent"), out.join("dangling")).unwrap();
        std::fs::hard_link(s.0.join("target"), out.join("hard")).unwrap();
        std::fs::create_dir(out.join("sub")).unwrap();
        for name in ["taken", "link", "dangling", "hard", "sub"] {
            let why = refusal(dir.create(name, 4));
            assert!(why.contains("already exists"), "{name}: {why}");
        }
        assert_eq!(std::fs::read(out.join("taken")).unwrap(), b"mine");
        assert_eq!(std::fs::read(s.0.join("target")).unwrap(), b"outside");
        assert!(!s.0.join("absent").exists());
        let (mut f, path) = dir.create("fresh", 4).unwrap();
        f.write_all(b"data").unwrap();
        assert_eq!(path, out.join("fresh"));
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
        assert!(refusal(dir.create("fresh", 4)).contains("already exists"), "a second time");
    }

    #[test]
    fn the_directory_opened_is_the_one_written_whatever_its_path_becomes() {
        let s = Scratch::new("moved");
        let out = s.0.join("out");
        let dir = OutputDir::open(&out, None).unwrap();
        std::fs::rename(&out, s.0.join("orig")).unwrap();
        std::fs::create_dir(s.0.join("other")).unwrap();
        std::os::unix::fs::symlink(s.0.join("other"), &out).unwrap();
        dir.create("f", 1).unwrap();
        assert!(s.0.join("orig/f").exists());
        assert!(!s.0.join("other/f").exists());
        let why = OutputDir::open(&s.0.join("orig/f"), None).err().expect("a file is no directory");
        assert!(format!("{why:#}").contains("not a directory"), "{why:#}");
    }

    #[test]
    fn a_file_must_fit_the_limit_and_the_free_space() {
        assert!(fits(10, Some(10), 10).is_ok());
        assert!(fits(10, None, 10).is_ok());
        let over = fits(11, Some(10), 100).unwrap_err().to_string();
        assert!(over.contains("--max-file-size of 10 bytes"), "{over}");
        let full = fits(11, None, 10).unwrap_err().to_string();
        assert!(full.contains("10 bytes free"), "{full}");
        let s = Scratch::new("limit");
        let dir = OutputDir::open(&s.0.join("out"), Some(100)).unwrap();
        assert!(refusal(dir.create("big", 101)).contains("--max-file-size"));
        assert!(!s.0.join("out/big").exists(), "refused before anything is created");
        assert!(refusal(dir.create("huge", u64::MAX)).contains("--max-file-size"));
        let dir = OutputDir::open(&s.0.join("out"), None).unwrap();
        assert!(refusal(dir.create("huge", u64::MAX)).contains("free"));
        assert!(!s.0.join("out/huge").exists());
    }
}
