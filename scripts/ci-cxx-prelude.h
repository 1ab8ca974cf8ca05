// Included first in every C++ file of a CI build (scripts/test.sh, `-Xcxx -include`).
//
// The cryptography package's C library is written in C++, and its public headers, read in C++,
// also declare a C++ interface (owning pointers and the like) by including the C++ standard
// library: about 24,000 of a file's 39,000 preprocessed lines. The library's own code in that
// package uses none of it, and the library's switch for going without it (BORINGSSL_NO_CXX)
// makes its 241 files compile in 41 CPU-seconds instead of 102 (docs/testing.md). A file that
// did use the interface would fail to compile, not change. Only that library's headers are
// named by its include path; the TLS package's copy of the library uses the interface and is
// left as it is. Release builds (the images, the benchmark) do not use this file.
#if __has_include(<CCryptoBoringSSL_base.h>)
#define BORINGSSL_NO_CXX 1
#endif
