"""One Textual widget per file."""
