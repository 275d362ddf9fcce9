// Quoting for a POSIX shell: the one place its rules live. Command lines are
// argument vectors end to end; they become shell text only at an edge that
// needs it (shown to a user, pasted into a terminal, or sent as an SSH exec
// request, which the remote side runs through the user's shell).
//
// Contract
// - shell_quote(arg) is one shell word that every POSIX shell turns back into
//   exactly `arg`: plain words ([A-Za-z0-9_-./,:=+@%]) stay as they are,
//   anything else goes in single quotes ('it'\''s'), so $(...), backticks,
//   ;, |, quotes, globs, ~, # and newlines are inert. The empty string is ''.
// - A NUL byte cannot be passed in an argv (or a shell word) at all:
//   contains_nul() says so, and callers reject such input with their own
//   error; shell_quote() itself never throws and drops nothing but quotes
//   the bytes up to the end.
// - join_for_shell() quotes every word and joins them with single spaces.
//
//   join_for_shell({"horovodrun", "-np", "2", "python3", "train.py", "--msg", "a b"})
//   // -> horovodrun -np 2 python3 train.py --msg 'a b'
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace muster::base {

std::string shell_quote(std::string_view arg);
std::string join_for_shell(const std::vector<std::string>& argv);
bool contains_nul(std::string_view text);

}  // namespace muster::base
