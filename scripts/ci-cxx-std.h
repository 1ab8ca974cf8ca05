// The C++ standard library headers the TLS package's copy of its C library includes, compiled
// once into a precompiled header for a CI build (scripts/ci-cc). Only standard headers: the
// library's own headers rename its symbols with a pragma that a precompiled header does not keep.
#include <algorithm>
#include <array>
#include <atomic>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
