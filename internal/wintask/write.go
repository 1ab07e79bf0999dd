package wintask

import "os"

// rewrite replaces f's content with data (f at offset 0), flushes it and
// closes f.
func rewrite(f *os.File, data []byte) error {
	err := f.Truncate(0)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: f.Name(), Err: err}
	}
	return nil
}
