package policyimport

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// wildStates runs the wildcard pattern pat ('*' any run of characters,
// '?' one, anything else itself; Codex's WildMatchPattern<'*', '?'>) over
// s, comparing letters without case when fold is set (ASCII, as Codex's
// new_case_insensitive), and returns the set of pattern positions it can
// be at afterwards (index len(pat) is the end): s matches pat when that
// one is set, and some longer string starting with s does when any is.
func wildStates(pat, s string, fold bool) []bool {
	p := []rune(pat)
	cur := make([]bool, len(p)+1)
	closure := func(set []bool) {
		for i := 0; i < len(p); i++ {
			if set[i] && p[i] == '*' {
				set[i+1] = true
			}
		}
	}
	cur[0] = true
	closure(cur)
	for _, c := range s {
		next := make([]bool, len(p)+1)
		for i := 0; i < len(p); i++ {
			if !cur[i] {
				continue
			}
			switch {
			case p[i] == '*':
				next[i] = true
			case p[i] == '?' || p[i] == c || fold && c < utf8.RuneSelf && p[i] < utf8.RuneSelf && strings.EqualFold(string(p[i]), string(c)):
				next[i+1] = true
			}
		}
		closure(next)
		cur = next
	}
	return cur
}

// wildMatch reports whether name matches pat (see wildStates).
func wildMatch(pat, name string, fold bool) bool {
	st := wildStates(pat, name, fold)
	return st[len(st)-1]
}

// wildMeets reports whether some name starting with prefix matches pat.
func wildMeets(pat, prefix string, fold bool) bool {
	for _, on := range wildStates(pat, prefix, fold) {
		if on {
			return true
		}
	}
	return false
}

// wildCovers reports whether every name starting with prefix matches
// pat. A character absent from pat can be matched only by '?' and '*', so
// if prefix followed by n of it matches for every n up to one past pat's
// length, the rest of pat is wildcards only, and every continuation of
// that length or longer matches too.
func wildCovers(pat, prefix string, fold bool) bool {
	filler := "\x01"
	if strings.Contains(pat, filler) {
		filler = "\x02"
	}
	for n := 0; n <= utf8.RuneCountInString(pat)+1; n++ {
		if !wildMatch(pat, prefix+strings.Repeat(filler, n), fold) {
			return false
		}
	}
	return true
}

// localeNames are the locale categories of glibc (locale(7)), which a
// "LC_*" pass entry is written as when an exclude names some of its
// variables.
var localeNames = []string{"LC_ALL", "LC_ADDRESS", "LC_COLLATE", "LC_CTYPE", "LC_IDENTIFICATION", "LC_MEASUREMENT",
	"LC_MESSAGES", "LC_MONETARY", "LC_NAME", "LC_NUMERIC", "LC_PAPER", "LC_TELEPHONE", "LC_TIME"}

// excludeEnv keeps the variables patterns name from the workload: it
// takes them out of process.env.pass. A pattern is a name, or with
// wildcards a Codex pattern ('*', '?'); fold compares without case
// (Codex's excludes do, srt's names do not). A pass entry they name is
// removed. A prefix entry of which they name only some variables cannot
// be narrowed in Corral's syntax: "LC_*" becomes the locale categories
// they do not name, another prefix is removed, with a warning (Corral
// then passes less than the source). It reports at line and key.
func (b *builder) excludeEnv(line int, key string, patterns []string, fold bool) {
	hit := func(f func(pat string) bool) bool { return slices.ContainsFunc(patterns, f) }
	var kept []entry
	var removed, narrowed []string
	for _, e := range b.envPass {
		v, _ := strconv.Unquote(e.value)
		prefix, isPrefix := strings.CutSuffix(v, "*")
		switch {
		case !isPrefix && hit(func(p string) bool { return wildMatch(p, v, fold) }),
			isPrefix && hit(func(p string) bool { return wildCovers(p, prefix, fold) }):
			removed = append(removed, v)
		case isPrefix && hit(func(p string) bool { return wildMeets(p, prefix, fold) }):
			narrowed = append(narrowed, v)
			if v == "LC_*" {
				for _, n := range localeNames {
					if !hit(func(p string) bool { return wildMatch(p, n, fold) }) {
						kept = append(kept, entry{value: quote(n), from: e.from})
					}
				}
			}
		default:
			kept = append(kept, e)
		}
	}
	b.envPass = kept
	what := strings.Join(patterns, ", ")
	switch {
	case len(narrowed) > 0:
		b.loss(Warning, line, key, "%s no longer passed as a prefix: Corral's process.env.pass cannot pass a prefix but %s (LC_* is written as the locale categories); list other variables to pass by name", strings.Join(narrowed, ", "), what)
	case len(removed) > 0:
		b.loss(Info, line, key, "%s taken out of process.env.pass", strings.Join(removed, ", "))
	default:
		b.loss(Info, line, key, "already so: Corral passes only the variables in process.env.pass, and none matches %s", what)
	}
}
