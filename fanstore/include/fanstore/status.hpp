// One error type for the whole core: what went wrong and where. Only the front ends turn it into errno.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace fanstore {

enum class Code : uint8_t {
  kOk = 0,
  kNotFound,         // no such path in the image                      -> ENOENT
  kNotDirectory,     // a path component is a file                     -> ENOTDIR
  kIsDirectory,      // file operation on a directory                  -> EISDIR
  kReadOnly,         // any write/create/rename/unlink under the mount -> EROFS
  kCorrupt,          // checksum mismatch, bad index, bad magic        -> EIO
  kIoError,          // the OS failed a read/write                     -> EIO
  kInvalidArgument,  // bad flags, bad option                          -> EINVAL
  kUnsupported,      // a feature this image/version does not have     -> ENOTSUP
  kNoSpace,          // disk full while writing                        -> ENOSPC
  kExists,           // output exists and is not empty                 -> EEXIST
  kPermission,       // the OS refused access                          -> EACCES
  kTimeout,          // a remote peer did not answer in time           -> EIO
  kNameTooLong,      // path longer than PATH_MAX                      -> ENAMETOOLONG
  kNoMemory,         // allocation failed                              -> ENOMEM
  kLoop,             // too many symlinks, or O_NOFOLLOW on a symlink   -> ELOOP
};
// The last code: what a peer sends is checked against it (a code added above must move it).
inline constexpr Code kLastCode = Code::kLoop;

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  // Builds a status from an errno value of a failed OS call; `what` names the call and its object.
  static Status FromErrno(int err, const std::string& what);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: part-00001.fsp: checksum mismatch for train/a.jpg" -- one line, for people.
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// The errno a POSIX front end (interposer, FUSE) reports for a status. ok -> 0.
int ToErrno(const Status& s);
const char* CodeName(Code c);
// A name as a one-line message shows it (as `ls -b` does): control characters, a newline in a file name say, and
// the backslash written as C escapes ("a\\nb"), so the message stays one line and no two names look alike.
std::string Printable(std::string_view name);

// Either a value or a non-OK status.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit on purpose
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must not be OK
  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<1>(v_);
  }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace fanstore
