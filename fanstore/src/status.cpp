// Status: construction from errno, the one mapping to errno used by every POSIX front end, and printing.
#include "fanstore/status.hpp"

#include <cerrno>
#include <cstring>

namespace fanstore {

Status Status::FromErrno(int err, const std::string& what) {
  Code c = Code::kIoError;
  switch (err) {
    case ENOENT: c = Code::kNotFound; break;
    case ENOTDIR: c = Code::kNotDirectory; break;
    case EISDIR: c = Code::kIsDirectory; break;
    case EROFS: c = Code::kReadOnly; break;
    case EINVAL: c = Code::kInvalidArgument; break;
    case ENOSPC:
    case EDQUOT: c = Code::kNoSpace; break;
    case EEXIST:
    case ENOTEMPTY: c = Code::kExists; break;
    case EACCES:
    case EPERM: c = Code::kPermission; break;
    case ENAMETOOLONG: c = Code::kNameTooLong; break;
    case ENOMEM: c = Code::kNoMemory; break;
    case ETIMEDOUT: c = Code::kTimeout; break;
    case ELOOP: c = Code::kLoop; break;
    case ENOTSUP: c = Code::kUnsupported; break;
    default: break;
  }
  return Status(c, what + ": " + std::strerror(err));
}

int ToErrno(const Status& s) {
  switch (s.code()) {
    case Code::kOk: return 0;
    case Code::kNotFound: return ENOENT;
    case Code::kNotDirectory: return ENOTDIR;
    case Code::kIsDirectory: return EISDIR;
    case Code::kReadOnly: return EROFS;
    case Code::kCorrupt: return EIO;
    case Code::kIoError: return EIO;
    case Code::kInvalidArgument: return EINVAL;
    case Code::kUnsupported: return ENOTSUP;
    case Code::kNoSpace: return ENOSPC;
    case Code::kExists: return EEXIST;
    case Code::kPermission: return EACCES;
    case Code::kTimeout: return EIO;
    case Code::kNameTooLong: return ENAMETOOLONG;
    case Code::kNoMemory: return ENOMEM;
    case Code::kLoop: return ELOOP;
  }
  return EIO;
}

const char* CodeName(Code c) {
  switch (c) {
    case Code::kOk: return "ok";
    case Code::kNotFound: return "not found";
    case Code::kNotDirectory: return "not a directory";
    case Code::kIsDirectory: return "is a directory";
    case Code::kReadOnly: return "read-only";
    case Code::kCorrupt: return "corrupt";
    case Code::kIoError: return "I/O error";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kUnsupported: return "unsupported";
    case Code::kNoSpace: return "no space";
    case Code::kExists: return "exists";
    case Code::kPermission: return "permission denied";
    case Code::kTimeout: return "timeout";
    case Code::kNameTooLong: return "name too long";
    case Code::kNoMemory: return "out of memory";
    case Code::kLoop: return "too many levels of symbolic links";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(CodeName(code_)) + ": " + message_;
}

namespace {

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlongs, surrogates or code points past
// U+10FFFF), or 0.
size_t Utf8Length(std::string_view s, size_t i) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = at(i);
  size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
  if (c < 0xc2 || c > 0xf4 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; k++)
    if ((at(i + k) & 0xc0) != 0x80) return 0;
  unsigned char c1 = at(i + 1);
  if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 > 0x8f))
    return 0;
  return n;
}

void Hex(std::string* out, unsigned char c) {
  static const char kHex[] = "0123456789abcdef";
  ((*out += "\\x") += kHex[c >> 4]) += kHex[c & 15];
}

}  // namespace

std::string Printable(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (size_t i = 0; i < name.size();) {
    unsigned char c = name[i];
    if (c >= 0x80) {
      // Well-formed UTF-8 is kept, except the C1 controls (U+0080-U+009F); any other byte above 0x7f is
      // escaped, so that a terminal never sees a raw C1 control (0x9b is CSI on some).
      size_t n = Utf8Length(name, i);
      if (n == 0 || (c == 0xc2 && static_cast<unsigned char>(name[i + 1]) < 0xa0)) {
        Hex(&out, c);
        i++;
      } else {
        out.append(name.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c >= 0x20 && c != 0x7f) out += static_cast<char>(c);
        else Hex(&out, c);
    }
    i++;
  }
  return out;
}

}  // namespace fanstore
