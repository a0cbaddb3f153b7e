//! A filesystem that loses power: a small in-memory FUSE filesystem (fuser)
//! that keeps every write in a volatile cache until the file is synced
//! (`fsync`/`fdatasync`), and on a simulated power cut throws away
//! everything not synced, in the spirit of LazyFS. `kill -9` cannot show a
//! missing fsync (the kernel still writes the page cache back); this can.
//!
//! The model:
//! - file data is what is lost: a write lands in the file's live bytes and
//!   in a list of dirty ranges; `fsync` copies those ranges (and the size)
//!   to the durable bytes; a cut makes the live bytes the durable ones
//!   again. A file created and never synced comes back empty;
//! - directory operations (create, unlink, rename, mkdir) are durable at
//!   once, as on a journaling filesystem that orders metadata;
//! - files are opened with direct I/O and attributes are never cached, so
//!   after a remount the kernel holds nothing from before the cut.
//!
//! [`PowerCutDisk::mount`] mounts it (through `fusermount3`, from Debian's
//! `fuse3`); [`PowerCutDisk::cut`] cuts the power of an unmounted disk.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};

/// No attribute or entry is cached by the kernel.
const TTL: Duration = Duration::ZERO;

enum Node {
    Dir { entries: BTreeMap<OsString, u64> },
    File(Data),
}

/// A file's bytes: what a reader sees now, and what survives a cut.
#[derive(Default)]
struct Data {
    live: Vec<u8>,
    durable: Vec<u8>,
    /// Ranges written since the last sync.
    dirty: Vec<(usize, usize)>,
}

impl Data {
    fn write(&mut self, offset: usize, bytes: &[u8]) {
        let end = offset + bytes.len();
        if self.live.len() < end {
            self.live.resize(end, 0);
        }
        self.live[offset..end].copy_from_slice(bytes);
        self.dirty.push((offset, end));
    }

    fn sync(&mut self) -> usize {
        let len = self.live.len();
        self.durable.resize(len, 0);
        let mut copied = 0;
        for (start, end) in self.dirty.drain(..) {
            let (start, end) = (start.min(len), end.min(len));
            self.durable[start..end].copy_from_slice(&self.live[start..end]);
            copied += end - start;
        }
        copied
    }
}

struct Disk {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
    /// Counts for the report.
    syncs: u64,
    synced_bytes: u64,
}

/// What a cut threw away.
#[derive(Debug, Default, Clone, Copy)]
pub struct CutReport {
    /// Files whose live bytes differed from their durable ones.
    pub files_rolled_back: usize,
    /// Bytes written but never synced, now gone.
    pub bytes_lost: usize,
}

/// The disk: survives mounts; only a [`PowerCutDisk::cut`] loses data.
#[derive(Clone)]
pub struct PowerCutDisk {
    disk: Arc<Mutex<Disk>>,
}

impl Default for PowerCutDisk {
    fn default() -> Self {
        Self::new()
    }
}

/// A mounted disk; dropping it unmounts.
pub struct Mounted {
    session: Option<fuser::BackgroundSession>,
    pub path: PathBuf,
}

impl Mounted {
    /// Unmounts and waits for the session to end.
    pub fn unmount(mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

impl PowerCutDisk {
    /// An empty disk with its root directory.
    pub fn new() -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(INodeNo::ROOT.0, Node::Dir { entries: BTreeMap::new() });
        Self { disk: Arc::new(Mutex::new(Disk { nodes, next_ino: 2, syncs: 0, synced_bytes: 0 })) }
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Mounts the disk at `at` (an existing, empty directory).
    pub fn mount(&self, at: &Path) -> Mounted {
        let mut config = fuser::Config::default();
        config.mount_options = vec![fuser::MountOption::FSName("ferry-powercut".into()), fuser::MountOption::RW];
        let session = fuser::spawn_mount(PowerCutFs { disk: self.clone() }, at, &config).unwrap_or_else(|e| {
            panic!("mount the power-cut filesystem at {} (is fuse3 installed?): {e}", at.display())
        });
        Mounted { session: Some(session), path: at.to_owned() }
    }

    /// Cuts the power: every file's unsynced writes are gone. Call it with
    /// the disk unmounted (after [`Mounted::unmount`]).
    pub fn cut(&self) -> CutReport {
        let mut disk = self.lock();
        let mut report = CutReport::default();
        for node in disk.nodes.values_mut() {
            if let Node::File(data) = node
                && (!data.dirty.is_empty() || data.live.len() != data.durable.len())
            {
                report.files_rolled_back += 1;
                report.bytes_lost += data.dirty.iter().map(|(s, e)| e - s).sum::<usize>();
                data.live.clone_from(&data.durable);
                data.dirty.clear();
            }
        }
        report
    }

    /// Syncs seen so far, and the bytes they made durable.
    pub fn syncs(&self) -> (u64, u64) {
        let disk = self.lock();
        (disk.syncs, disk.synced_bytes)
    }
}

struct PowerCutFs {
    disk: PowerCutDisk,
}

fn attr(ino: u64, node: &Node) -> FileAttr {
    let (kind, size, perm) = match node {
        Node::Dir { .. } => (FileType::Directory, 0, 0o755),
        Node::File(d) => (FileType::RegularFile, d.live.len() as u64, 0o644),
    };
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl PowerCutFs {
    fn entry_of(disk: &Disk, parent: INodeNo, name: &OsStr) -> Option<u64> {
        match disk.nodes.get(&parent.0) {
            Some(Node::Dir { entries }) => entries.get(name).copied(),
            _ => None,
        }
    }

    /// Adds a node under `parent`; its attributes.
    fn add(&self, parent: INodeNo, name: &OsStr, node: Node) -> Result<FileAttr, Errno> {
        let mut disk = self.disk.lock();
        if Self::entry_of(&disk, parent, name).is_some() {
            return Err(Errno::EEXIST);
        }
        let ino = disk.next_ino;
        disk.next_ino += 1;
        let attr = attr(ino, &node);
        match disk.nodes.get_mut(&parent.0) {
            Some(Node::Dir { entries }) => {
                entries.insert(name.to_owned(), ino);
            }
            _ => return Err(Errno::ENOTDIR),
        }
        disk.nodes.insert(ino, node);
        Ok(attr)
    }

    fn remove(&self, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let mut disk = self.disk.lock();
        let ino = Self::entry_of(&disk, parent, name).ok_or(Errno::ENOENT)?;
        match (disk.nodes.get(&ino), dir) {
            (Some(Node::Dir { entries }), true) if !entries.is_empty() => return Err(Errno::ENOTEMPTY),
            (Some(Node::Dir { .. }), false) => return Err(Errno::EISDIR),
            (Some(Node::File(_)), true) => return Err(Errno::ENOTDIR),
            _ => {}
        }
        if let Some(Node::Dir { entries }) = disk.nodes.get_mut(&parent.0) {
            entries.remove(name);
        }
        disk.nodes.remove(&ino);
        Ok(())
    }
}

impl Filesystem for PowerCutFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let disk = self.disk.lock();
        match Self::entry_of(&disk, parent, name).and_then(|ino| disk.nodes.get(&ino).map(|n| attr(ino, n))) {
            Some(a) => reply.entry(&TTL, &a, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.disk.lock().nodes.get(&ino.0) {
            Some(n) => reply.attr(&TTL, &attr(ino.0, n)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut disk = self.disk.lock();
        let Some(node) = disk.nodes.get_mut(&ino.0) else { return reply.error(Errno::ENOENT) };
        if let (Some(size), Node::File(data)) = (size, &mut *node) {
            // A size change is data too: durable only once synced.
            data.live.resize(size as usize, 0);
            data.dirty.push((0, 0));
        }
        reply.attr(&TTL, &attr(ino.0, node));
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, _mode: u32, _umask: u32, reply: ReplyEntry) {
        match self.add(parent, name, Node::Dir { entries: BTreeMap::new() }) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.remove(parent, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut disk = self.disk.lock();
        let Some(ino) = Self::entry_of(&disk, parent, name) else { return reply.error(Errno::ENOENT) };
        let replaced = Self::entry_of(&disk, newparent, newname);
        if let Some(Node::Dir { entries }) = disk.nodes.get_mut(&parent.0) {
            entries.remove(name);
        }
        match disk.nodes.get_mut(&newparent.0) {
            Some(Node::Dir { entries }) => {
                entries.insert(newname.to_owned(), ino);
            }
            _ => return reply.error(Errno::ENOTDIR),
        }
        if let Some(old) = replaced.filter(|old| *old != ino) {
            disk.nodes.remove(&old);
        }
        reply.ok();
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.disk.lock().nodes.get(&ino.0) {
            Some(Node::File(_)) => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            Some(Node::Dir { .. }) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.disk.lock().nodes.get(&ino.0) {
            Some(Node::File(data)) => {
                let start = (offset as usize).min(data.live.len());
                let end = (start + size as usize).min(data.live.len());
                reply.data(&data.live[start..end]);
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        bytes: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.disk.lock().nodes.get_mut(&ino.0) {
            Some(Node::File(data)) => {
                data.write(offset as usize, bytes);
                reply.written(bytes.len() as u32);
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // close(2) makes nothing durable.
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let mut disk = self.disk.lock();
        let copied = match disk.nodes.get_mut(&ino.0) {
            Some(Node::File(data)) => data.sync(),
            _ => 0,
        };
        disk.syncs += 1;
        disk.synced_bytes += copied as u64;
        reply.ok();
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let disk = self.disk.lock();
        let Some(Node::Dir { entries }) = disk.nodes.get(&ino.0) else { return reply.error(Errno::ENOTDIR) };
        let mut all: Vec<(u64, FileType, OsString)> =
            vec![(ino.0, FileType::Directory, ".".into()), (INodeNo::ROOT.0, FileType::Directory, "..".into())];
        for (name, child) in entries {
            let kind = match disk.nodes.get(child) {
                Some(Node::Dir { .. }) => FileType::Directory,
                _ => FileType::RegularFile,
            };
            all.push((*child, kind, name.clone()));
        }
        for (i, (child, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 20, 1 << 19, 1 << 19, 1 << 16, 1 << 15, 4096, 255, 4096);
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.add(parent, name, Node::File(Data::default())) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if mode != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        match self.disk.lock().nodes.get_mut(&ino.0) {
            Some(Node::File(data)) => {
                let end = (offset + length) as usize;
                if data.live.len() < end {
                    data.live.resize(end, 0);
                    data.dirty.push((0, 0));
                }
                reply.ok();
            }
            _ => reply.error(Errno::ENOENT),
        }
    }
}
