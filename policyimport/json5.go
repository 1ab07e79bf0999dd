package policyimport

import (
	"bytes"
	"fmt"
	"strconv"
)

// json5ToJSON rewrites a JSON5 document (json5.org: comments, unquoted
// identifier keys, single-quoted strings, trailing commas, leading +,
// hexadecimal numbers aside) as JSON with every line where it was, so
// that the JSON's positions are the source's. Strings are re-quoted with
// JSON escapes; what is not JSON5 is left for the JSON parser to refuse
// at its line.
func json5ToJSON(src []byte) ([]byte, error) {
	var out bytes.Buffer
	line := 1
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			end := bytes.Index(src[i+2:], []byte("*/"))
			if end < 0 {
				return nil, fmt.Errorf("line %d: a comment that does not end", line)
			}
			n := bytes.Count(src[i:i+2+end+2], []byte("\n"))
			out.Write(bytes.Repeat([]byte("\n"), n))
			line += n
			i += 2 + end + 2
		case c == '"' || c == '\'':
			s, n, err := json5String(src[i:])
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", line, err)
			}
			out.WriteString(strconv.Quote(s))
			i += n
		case c == ',':
			// A trailing comma: only space and comments before } or ].
			j := i + 1
			for j < len(src) {
				if src[j] == '/' && j+1 < len(src) && src[j+1] == '/' {
					for j < len(src) && src[j] != '\n' {
						j++
					}
					continue
				}
				if src[j] == ' ' || src[j] == '\t' || src[j] == '\r' || src[j] == '\n' {
					j++
					continue
				}
				break
			}
			if j < len(src) && (src[j] == '}' || src[j] == ']') {
				i++
				continue
			}
			out.WriteByte(c)
			i++
		case isIdentStart(c):
			j := i
			for j < len(src) && (isIdentStart(src[j]) || src[j] >= '0' && src[j] <= '9') {
				j++
			}
			word := string(src[i:j])
			k := j
			for k < len(src) && (src[k] == ' ' || src[k] == '\t') {
				k++
			}
			if k < len(src) && src[k] == ':' && word != "true" && word != "false" && word != "null" {
				out.WriteString(strconv.Quote(word)) // an unquoted key
			} else {
				out.WriteString(word)
			}
			i = j
		default:
			if c == '\n' {
				line++
			}
			out.WriteByte(c)
			i++
		}
	}
	return out.Bytes(), nil
}

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$'
}

// json5String reads the string literal at the start of b (quoted with its
// first byte) and returns its value and length.
func json5String(b []byte) (string, int, error) {
	q := b[0]
	var s []byte
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == q:
			return string(s), i + 1, nil
		case c == '\n':
			return "", 0, fmt.Errorf("a string that does not end on its line")
		case c == '\\' && i+1 < len(b):
			i++
			switch e := b[i]; e {
			case 'n':
				s = append(s, '\n')
			case 't':
				s = append(s, '\t')
			case 'r':
				s = append(s, '\r')
			case 'b':
				s = append(s, '\b')
			case 'f':
				s = append(s, '\f')
			case 'u':
				if i+4 < len(b) {
					if r, err := strconv.ParseUint(string(b[i+1:i+5]), 16, 32); err == nil {
						s = append(s, string(rune(r))...)
						i += 4
						continue
					}
				}
				return "", 0, fmt.Errorf("a bad \\u escape")
			default:
				s = append(s, e) // \" \' \\ \/ and JSON5's identity escapes
			}
		default:
			s = append(s, c)
		}
	}
	return "", 0, fmt.Errorf("a string that does not end")
}
