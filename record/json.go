package record

import (
	"encoding/base64"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends row as one JSON object with fields in schema order. Float NaN and ±Inf,
// which JSON cannot hold, are written as null; bytes as base64; timestamps as RFC 3339
// strings; maps as objects.
func AppendJSON(buf []byte, s *Schema, row Row) []byte {
	buf = append(buf, '{')
	for i, f := range s.fields {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSONString(buf, f.Name)
		buf = append(buf, ':')
		v := row[i]
		switch f.Type {
		case Int64:
			buf = strconv.AppendInt(buf, v.Int(), 10)
		case Float64:
			x := v.Float()
			if math.IsNaN(x) || math.IsInf(x, 0) {
				buf = append(buf, "null"...)
			} else {
				buf = strconv.AppendFloat(buf, x, 'g', -1, 64)
			}
		case Bool:
			buf = strconv.AppendBool(buf, v.Bool())
		case String:
			buf = appendJSONString(buf, v.s)
		case Bytes:
			buf = append(buf, '"')
			buf = base64.StdEncoding.AppendEncode(buf, v.BytesView())
			buf = append(buf, '"')
		case Timestamp:
			buf = append(buf, '"')
			buf = v.Time().AppendFormat(buf, time.RFC3339Nano)
			buf = append(buf, '"')
		case Map:
			buf = appendMapJSON(buf, v)
		}
	}
	return append(buf, '}')
}

const hexDigits = "0123456789abcdef"

func appendJSONString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}
