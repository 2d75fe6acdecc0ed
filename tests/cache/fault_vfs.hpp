// A SQLite VFS for fault-injection tests: it delegates everything to the default VFS and,
// when armed, fails the Nth call of one kind of write step (open, write, sync, truncate,
// wal-index map) with a chosen SQLite error, the way a full, failing or read-only disk
// would. Installed as the default VFS for its lifetime, so the code under test opens its
// index through it without knowing.
#pragma once

#include <sqlite3.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string>

namespace jitcache::cache::testing {

enum class VfsOp { open, write, sync, truncate, shm_map };
inline constexpr std::array k_vfs_ops = {VfsOp::open, VfsOp::write, VfsOp::sync, VfsOp::truncate,
                                         VfsOp::shm_map};

inline const char* to_string(VfsOp op) {
  switch (op) {
    case VfsOp::open: return "xOpen";
    case VfsOp::write: return "xWrite";
    case VfsOp::sync: return "xSync";
    case VfsOp::truncate: return "xTruncate";
    case VfsOp::shm_map: return "xShmMap";
  }
  return "?";
}

// The SQLite error a failing system call with `error_number` gives at `op`, as the unix
// VFS reports it.
inline int sqlite_code_for(VfsOp op, int error_number) {
  if (op == VfsOp::open) return SQLITE_CANTOPEN;
  // SQLITE_READONLY from xShmMap means "mapped, but read-only" to SQLite, which then uses
  // the mapping: the unix VFS reports a failing map as an I/O error whatever the errno.
  if (op == VfsOp::shm_map) return error_number == ENOSPC ? SQLITE_IOERR_SHMSIZE : SQLITE_IOERR_SHMMAP;
  if (error_number == ENOSPC) return SQLITE_FULL;
  if (error_number == EROFS) return SQLITE_READONLY;
  switch (op) {
    case VfsOp::write: return SQLITE_IOERR_WRITE;
    case VfsOp::sync: return SQLITE_IOERR_FSYNC;
    case VfsOp::truncate: return SQLITE_IOERR_TRUNCATE;
    case VfsOp::shm_map: return SQLITE_IOERR_SHMMAP;
    case VfsOp::open: break;
  }
  return SQLITE_IOERR;
}

class FaultVfs {
 public:
  FaultVfs() {
    s_self = this;
    m_real = sqlite3_vfs_find(nullptr);
    m_vfs = *m_real;
    m_vfs.zName = "jitcache-fault";
    m_vfs.szOsFile = static_cast<int>(sizeof(File)) + m_real->szOsFile;
    m_vfs.xOpen = &FaultVfs::x_open;
    sqlite3_vfs_register(&m_vfs, 1);
  }
  ~FaultVfs() {
    sqlite3_vfs_unregister(&m_vfs);
    sqlite3_vfs_register(m_real, 1);
    s_self = nullptr;
  }
  FaultVfs(const FaultVfs&) = delete;
  FaultVfs& operator=(const FaultVfs&) = delete;

  // Counts calls from now on; fails call number `nth` (0-based) of `op` when `code` != 0.
  void arm(VfsOp op, int nth, int code, int error_number) {
    m_counts = {};
    m_op = op;
    m_nth = nth;
    m_code = code;
    m_errno = error_number;
    m_armed = true;
    m_fired = false;
  }
  void count_only() { arm(VfsOp::open, -1, 0, 0); }
  void disarm() { m_armed = false; }
  int count(VfsOp op) const { return m_counts[static_cast<std::size_t>(op)]; }
  bool fired() const { return m_fired; }

 private:
  struct File {
    sqlite3_file base;
    sqlite3_file* real;
  };

  // 0 to go on, else the error this call fails with.
  static int fault(VfsOp op) {
    FaultVfs* self = s_self;
    if (self == nullptr || !self->m_armed) return 0;
    const int call = self->m_counts[static_cast<std::size_t>(op)]++;
    if (op != self->m_op || call != self->m_nth || self->m_code == 0) return 0;
    self->m_fired = true;
    errno = self->m_errno;
    return self->m_code;
  }

  static sqlite3_file* real(sqlite3_file* file) { return reinterpret_cast<File*>(file)->real; }

  static int x_open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* file, int flags, int* out_flags) {
    File* f = reinterpret_cast<File*>(file);
    f->base.pMethods = nullptr;
    f->real = reinterpret_cast<sqlite3_file*>(f + 1);
    if (const int code = fault(VfsOp::open)) return code;
    const int rc = s_self->m_real->xOpen(s_self->m_real, name, f->real, flags, out_flags);
    if (rc != SQLITE_OK) return rc;
    static sqlite3_io_methods methods = make_methods(f->real->pMethods);
    f->base.pMethods = f->real->pMethods != nullptr ? &methods : nullptr;
    return SQLITE_OK;
  }

  static sqlite3_io_methods make_methods(const sqlite3_io_methods* base) {
    sqlite3_io_methods m{};
    m.iVersion = base->iVersion;
    m.xClose = [](sqlite3_file* f) {
      sqlite3_file* r = real(f);
      return r->pMethods != nullptr ? r->pMethods->xClose(r) : SQLITE_OK;
    };
    m.xRead = [](sqlite3_file* f, void* b, int n, sqlite3_int64 o) {
      return real(f)->pMethods->xRead(real(f), b, n, o);
    };
    m.xWrite = [](sqlite3_file* f, const void* b, int n, sqlite3_int64 o) {
      if (const int code = fault(VfsOp::write)) return code;
      return real(f)->pMethods->xWrite(real(f), b, n, o);
    };
    m.xTruncate = [](sqlite3_file* f, sqlite3_int64 size) {
      if (const int code = fault(VfsOp::truncate)) return code;
      return real(f)->pMethods->xTruncate(real(f), size);
    };
    m.xSync = [](sqlite3_file* f, int flags) {
      if (const int code = fault(VfsOp::sync)) return code;
      return real(f)->pMethods->xSync(real(f), flags);
    };
    m.xFileSize = [](sqlite3_file* f, sqlite3_int64* s) { return real(f)->pMethods->xFileSize(real(f), s); };
    m.xLock = [](sqlite3_file* f, int l) { return real(f)->pMethods->xLock(real(f), l); };
    m.xUnlock = [](sqlite3_file* f, int l) { return real(f)->pMethods->xUnlock(real(f), l); };
    m.xCheckReservedLock = [](sqlite3_file* f, int* r) {
      return real(f)->pMethods->xCheckReservedLock(real(f), r);
    };
    m.xFileControl = [](sqlite3_file* f, int op, void* a) {
      return real(f)->pMethods->xFileControl(real(f), op, a);
    };
    m.xSectorSize = [](sqlite3_file* f) { return real(f)->pMethods->xSectorSize(real(f)); };
    m.xDeviceCharacteristics = [](sqlite3_file* f) {
      return real(f)->pMethods->xDeviceCharacteristics(real(f));
    };
    if (base->iVersion >= 2) {
      m.xShmMap = [](sqlite3_file* f, int page, int size, int extend, void volatile** p) {
        if (const int code = fault(VfsOp::shm_map)) {
          *p = nullptr;  // as the unix VFS leaves it on failure
          return code;
        }
        return real(f)->pMethods->xShmMap(real(f), page, size, extend, p);
      };
      m.xShmLock = [](sqlite3_file* f, int o, int n, int flags) {
        return real(f)->pMethods->xShmLock(real(f), o, n, flags);
      };
      m.xShmBarrier = [](sqlite3_file* f) { real(f)->pMethods->xShmBarrier(real(f)); };
      m.xShmUnmap = [](sqlite3_file* f, int del) { return real(f)->pMethods->xShmUnmap(real(f), del); };
    }
    if (base->iVersion >= 3) {
      m.xFetch = [](sqlite3_file* f, sqlite3_int64 o, int n, void** p) {
        return real(f)->pMethods->xFetch(real(f), o, n, p);
      };
      m.xUnfetch = [](sqlite3_file* f, sqlite3_int64 o, void* p) {
        return real(f)->pMethods->xUnfetch(real(f), o, p);
      };
    }
    return m;
  }

  static inline FaultVfs* s_self = nullptr;
  sqlite3_vfs* m_real = nullptr;
  sqlite3_vfs m_vfs{};
  std::array<int, k_vfs_ops.size()> m_counts{};
  VfsOp m_op = VfsOp::open;
  int m_nth = -1;
  int m_code = 0;
  int m_errno = 0;
  bool m_armed = false;
  bool m_fired = false;
};

}  // namespace jitcache::cache::testing
