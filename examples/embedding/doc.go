// Command embedding is the service of the quick start of docs/embedding.md, and the
// source of the docs' Go code blocks: main.go is the quick start, guide.go holds the
// blocks of the guide's reference sections, main_test.go its test, and blocks.go the
// block of docs/architecture.md (README.md's is embedConsumer in
// consumer/example_test.go). Each Go block of README.md and docs/*.md is preceded by a
// marker naming its source in the module (<!-- snippet: path --> for a whole file,
// <!-- snippet: path#name --> for the lines between "// snippet:start name" and
// "// snippet:end name"), and TestDocSnippets fails when a block has no marker or
// differs from its source. So the docs show code that builds and is vetted; the quick
// start, its test and README.md's consumer also run in make test.
package main
