//go:build linux

package seccomp

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// assembler collects classic BPF instructions whose conditional jumps name
// labels instead of relative offsets; finish resolves the labels, so no jump
// offset in this package is computed by hand.
type assembler struct {
	ins    []bpf.Instruction
	fixups []fixup
	labels map[string]int
	serial int
}

type fixup struct {
	at      int    // index of the JumpIf
	ifTrue  string // label, or "" for the next instruction
	ifFalse string
}

func newAssembler() *assembler {
	return &assembler{labels: map[string]int{}}
}

// newLabel returns a fresh label name with the given prefix.
func (a *assembler) newLabel(prefix string) string {
	a.serial++
	return fmt.Sprintf("%s#%d", prefix, a.serial)
}

// label binds name to the next instruction emitted.
func (a *assembler) label(name string) {
	if _, dup := a.labels[name]; dup {
		panic("seccomp: duplicate BPF label " + name)
	}
	a.labels[name] = len(a.ins)
}

// load32 loads the 32-bit word at off in struct seccomp_data into A.
func (a *assembler) load32(off uint32) {
	a.ins = append(a.ins, bpf.LoadAbsolute{Off: off, Size: 4})
}

// and32 sets A = A & mask.
func (a *assembler) and32(mask uint32) {
	a.ins = append(a.ins, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mask})
}

// ret returns the seccomp action v.
func (a *assembler) ret(v uint32) {
	a.ins = append(a.ins, bpf.RetConstant{Val: v})
}

// jump emits "if A <cond> val goto ifTrue else goto ifFalse"; an empty
// label means the next instruction. Only the tests that classic BPF encodes
// natively are accepted (JumpEqual, JumpGreaterThan, JumpGreaterOrEqual,
// JumpBitsSet) so that what we write is what the kernel runs.
func (a *assembler) jump(cond bpf.JumpTest, val uint32, ifTrue, ifFalse string) {
	switch cond {
	case bpf.JumpEqual, bpf.JumpGreaterThan, bpf.JumpGreaterOrEqual, bpf.JumpBitsSet:
	default:
		panic(fmt.Sprintf("seccomp: jump test %v is not a native BPF test", cond))
	}
	a.fixups = append(a.fixups, fixup{at: len(a.ins), ifTrue: ifTrue, ifFalse: ifFalse})
	a.ins = append(a.ins, bpf.JumpIf{Cond: cond, Val: val})
}

// finish resolves every label into the 8-bit forward skip counts of classic
// BPF and returns the program.
func (a *assembler) finish() ([]bpf.Instruction, error) {
	skip := func(at int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		target, ok := a.labels[label]
		if !ok {
			return 0, fmt.Errorf("undefined BPF label %q", label)
		}
		n := target - (at + 1)
		if n < 0 || n > 255 {
			return 0, fmt.Errorf("BPF jump to %q from %d is out of range (%d)", label, at, n)
		}
		if target >= len(a.ins) {
			return 0, fmt.Errorf("BPF label %q points past the program", label)
		}
		return uint8(n), nil
	}
	out := append([]bpf.Instruction(nil), a.ins...)
	for _, f := range a.fixups {
		j := out[f.at].(bpf.JumpIf)
		var err error
		if j.SkipTrue, err = skip(f.at, f.ifTrue); err != nil {
			return nil, err
		}
		if j.SkipFalse, err = skip(f.at, f.ifFalse); err != nil {
			return nil, err
		}
		out[f.at] = j
	}
	return out, nil
}
