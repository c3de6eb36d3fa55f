// Package sqlname validates and quotes the table names of the library's Postgres tables,
// so that every package accepts the same names and interpolates them into SQL the same
// way.
//
// A name is "table" or "schema.table". Each part is non-empty, at most MaxPartLen bytes
// (Postgres would silently truncate a longer identifier) and free of NUL bytes; any other
// character is allowed, because every part is quoted: names are case-sensitive. A name
// without a schema resolves through the connection's search_path.
package sqlname

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// MaxPartLen is the longest identifier Postgres keeps without truncating it
// (NAMEDATALEN - 1).
const MaxPartLen = 63

// ErrInvalid is wrapped by every error Parse returns. Packages wrap it again in their
// own sentinel (fmt.Errorf("%w: %w", ErrInvalidConfig, err)).
var ErrInvalid = errors.New("invalid table name")

// Name is a validated, possibly schema-qualified table name. The zero Name is invalid.
type Name struct {
	schema string // "" when unqualified
	table  string
}

// Parse validates name.
func Parse(name string) (Name, error) {
	if name == "" {
		return Name{}, fmt.Errorf("%w: empty", ErrInvalid)
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return Name{}, fmt.Errorf("%w: %q has more than one dot", ErrInvalid, name)
	}
	for _, p := range parts {
		switch {
		case p == "":
			return Name{}, fmt.Errorf("%w: %q has an empty part", ErrInvalid, name)
		case len(p) > MaxPartLen:
			return Name{}, fmt.Errorf("%w: %q has a part longer than %d bytes", ErrInvalid, name, MaxPartLen)
		case strings.IndexByte(p, 0) >= 0:
			return Name{}, fmt.Errorf("%w: %q contains a NUL byte", ErrInvalid, name)
		}
	}
	if len(parts) == 1 {
		return Name{table: parts[0]}, nil
	}
	return Name{schema: parts[0], table: parts[1]}, nil
}

// MustParse is Parse for names known to be valid (the packages' defaults); it panics
// otherwise.
func MustParse(name string) Name {
	n, err := Parse(name)
	if err != nil {
		panic(err)
	}
	return n
}

// String returns the name as given to Parse.
func (n Name) String() string {
	if n.schema == "" {
		return n.table
	}
	return n.schema + "." + n.table
}

// Schema returns the schema part, "" if the name is unqualified.
func (n Name) Schema() string { return n.schema }

// Table returns the table part.
func (n Name) Table() string { return n.table }

// Quoted returns the name quoted for SQL: "schema"."table".
func (n Name) Quoted() string {
	if n.schema == "" {
		return pgx.Identifier{n.table}.Sanitize()
	}
	return pgx.Identifier{n.schema, n.table}.Sanitize()
}

// Derived returns the quoted, unqualified identifier of an object named after the table
// (an index or a constraint: "table_suffix"). Postgres cuts it to MaxPartLen bytes.
func (n Name) Derived(suffix string) string {
	return pgx.Identifier{n.table + suffix}.Sanitize()
}

// WithSuffix returns the name of a sibling table in the same schema: table+suffix. The
// result must itself be valid, which the caller ensures by bounding the table part.
func (n Name) WithSuffix(suffix string) Name {
	return Name{schema: n.schema, table: n.table + suffix}
}

// lowerRE is a lower-case SQL identifier that needs no quoting.
var lowerRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Plain reports whether every part is a lower-case identifier of at most maxLen bytes
// that means the same quoted or unquoted. Packages that also derive other names from the
// table name (a NOTIFY channel, a sibling table) may require it.
func (n Name) Plain(maxLen int) bool {
	plain := func(p string) bool { return len(p) <= maxLen && lowerRE.MatchString(p) }
	return plain(n.table) && (n.schema == "" || plain(n.schema))
}
