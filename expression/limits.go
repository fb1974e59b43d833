package expression

import (
	"fmt"
	"unicode/utf8"

	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser/lexer"
)

// Limits on an expression's text, checked before expr parses it: expr's parser recurses once
// per bracket, and a spec with a million nested parentheses overflowed the JobManager's stack
// (fatal, not a recoverable panic).
const (
	// MaxLength bounds an expression's text in bytes. The longest expression of a real job is
	// a few hundred bytes; 64 KiB also bounds the parser's work on any other deep shape (a
	// chain of unary or right-associative operators recurses at most once per two bytes).
	MaxLength = 64 << 10
	// MaxNesting bounds how deeply brackets ((), [], {}) nest. A few levels are common, tens
	// are rare; 256 keeps the parser's recursion a few hundred frames deep.
	MaxNesting = 256
	// maxNodes bounds the nodes of an expression's syntax tree, which the checker, the
	// optimizer, the compiler and the native translation walk recursively (expr's default).
	maxNodes = 10000
)

// checkSize checks src against MaxLength and MaxNesting without parsing it, and returns the
// identifiers it names, in order (repeated). A nesting error is a *file.Error, as expr's are;
// a lexical error is left for expr to report.
func checkSize(src string) ([]string, error) {
	if len(src) > MaxLength {
		return nil, fmt.Errorf("expression is %d bytes long; the limit is %d bytes", len(src), MaxLength)
	}
	source := file.NewSource(src)
	l := lexer.New()
	l.Reset(source)
	var names []string
	depth := 0
	for {
		tok, err := l.Next()
		if err != nil || tok.Kind == lexer.EOF {
			// Also a lexical error: expr reports it, at the same place.
			return names, nil
		}
		switch {
		case tok.Kind == lexer.Identifier:
			names = append(names, tok.Value)
		case tok.Is(lexer.Bracket, "(", "[", "{"):
			depth++
			if depth > MaxNesting {
				e := &file.Error{Location: tok.Location, Message: fmt.Sprintf("brackets nest more than %d deep", MaxNesting)}
				return nil, e.Bind(source)
			}
		case tok.Is(lexer.Bracket, ")", "]", "}"):
			depth = max(depth-1, 0) // an unbalanced one is expr's to report
		}
	}
}

// maxQuoted bounds the part of an expression that Quote shows.
const maxQuoted = 160

// Quote returns src quoted for a message (%q), cut after maxQuoted bytes with its length
// said: a problem or a runtime error names the expression without repeating up to MaxLength
// bytes of it.
func Quote(src string) string {
	if len(src) <= maxQuoted {
		return fmt.Sprintf("%q", src)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(src[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", src[:cut], len(src))
}
