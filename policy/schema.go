package policy

import _ "embed"

//go:embed schema.json
var schema []byte

// Schema returns the JSON Schema (draft 2020-12) of a version 1 policy
// file, for editors to complete and check policies (YAML language servers
// accept it too). Every object has additionalProperties false. The schema
// checks shapes; Parse remains the authority (it also rejects "..", /proc
// tricks and the like). The caller may modify the returned slice.
func Schema() []byte {
	return append([]byte(nil), schema...)
}
