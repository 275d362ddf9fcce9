// Quoting argument vectors for a POSIX shell, at the very edge (the rules:
// api/base/shell_quote.h; this adds SpecError for a NUL byte).
//
// Launch lines are built and run as argument vectors (std::vector<std::string>);
// only when a line must be shown to a user or pasted into a terminal is it
// joined into one string, here. Every argument comes out as one shell word
// with its exact bytes: plain words stay as they are, anything else goes in
// single quotes ('it'\''s'), so $(...), backticks, ;, |, quotes, globs and
// newlines are inert. A NUL byte cannot be passed in an argv at all, so it is
// rejected with SpecError.
//
//   join_for_shell({"horovodrun", "-np", "2", "python3", "train.py", "--msg", "a b"})
//   // -> horovodrun -np 2 python3 train.py --msg 'a b'
#pragma once

#include <string>
#include <vector>

namespace muster::clusterspec {

// One shell word that the shell turns back into exactly `arg`.
// Throws SpecError if `arg` contains a NUL byte.
std::string shell_quote(const std::string& arg);

// The words of `argv` quoted and joined with single spaces.
std::string join_for_shell(const std::vector<std::string>& argv);

}  // namespace muster::clusterspec
