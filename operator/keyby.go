package operator

import (
	"encoding/json"

	"github.com/goflink/goflink/expression"
	"github.com/goflink/goflink/record"
)

// KeyBy partitions its input by the value of an expression (spec field key) for the keyed
// operators that read it. It runs no code of its own: its producers' network writers route
// each record to the subtask that owns its key's key group.
var KeyBy = Define(Type{Name: "key-by", Role: RoleKeyBy, Fields: []string{"key"}},
	func(p *Planner) (keyByConfig, *Shape) {
		var c keyByConfig
		if e, ok := p.Require("key"); ok {
			switch src, t, _, ok := p.Expr(e.Value, expression.Options{}); {
			case !ok:
			case t == record.Map:
				e.Problemf("a key cannot be a map; key by one of its entries, such as %s[\"name\"]", src)
			default:
				c.Key = src
			}
		}
		return c, p.In
	}, nil)

type keyByConfig struct {
	Key string `json:"key"`
}

// KeyExpression returns the key expression of a key-by operator's configuration ("" when its
// plan found a problem with it).
func KeyExpression(config []byte) string {
	var c keyByConfig
	_ = json.Unmarshal(config, &c)
	return c.Key
}
