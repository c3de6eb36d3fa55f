// Command embedding is the service of the quick start of docs/embedding.md, and the
// source of every Go code block of the docs: main.go is the quick start, guide.go holds
// the blocks of the guide's reference sections, main_test.go its test, and blocks.go the
// blocks of README.md and docs/architecture.md. Each block in the docs is preceded by a
// marker naming its source here (<!-- snippet: path --> for a whole file,
// <!-- snippet: path#name --> for the lines between "// snippet:start name" and
// "// snippet:end name"), and TestDocSnippets fails when a block has no marker or
// differs from its source. So the docs show code that builds, is vetted and, for the
// quick start and its test, runs in make test.
package main
