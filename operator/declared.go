package operator

import (
	"github.com/goflink/goflink/job/spec"
	"github.com/goflink/goflink/record"
)

// DeclaredFields reads a source's declared schema, a map of field name to type
// ({id: int64, name: string}), as the kafka source's schema and the postgres-cdc source's
// schema are written. reserved, when set, returns the problem of a name the source adds itself
// ("" for a name that is free). After a problem, fields are those known (record.Invalid where
// the type is bad), and open says some names are not known.
func DeclaredFields(e spec.Entry, reserved func(name string) string) (fields []record.Field, open bool) {
	m, ok := e.Map()
	if !ok {
		return nil, true
	}
	if m.Len() == 0 {
		e.Problemf("needs at least one field")
		return nil, true
	}
	for _, fe := range m.Entries() {
		if !spec.Identifier.MatchString(fe.Key) {
			fe.Problemf("field names must be identifiers (letters, digits, _)")
			open = true
			continue
		}
		if reserved != nil {
			if msg := reserved(fe.Key); msg != "" {
				fe.Problemf("%s", msg)
				open = true
				continue
			}
		}
		f := record.Field{Name: fe.Key}
		if v, ok := fe.String(); ok {
			if t, err := record.ParseType(v); err != nil {
				fe.Problemf("%v", err)
			} else {
				f.Type = t
			}
		}
		fields = append(fields, f)
	}
	return fields, open
}
