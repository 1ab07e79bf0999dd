package wine

import (
	"sync"

	"golang.org/x/sys/windows"
)

// detected looks for ntdll's wine_get_version, which Wine exports and
// Windows does not (the check Wine's own documentation suggests).
var detected = sync.OnceValue(func() bool {
	ntdll := windows.NewLazySystemDLL("ntdll.dll")
	return ntdll.NewProc("wine_get_version").Find() == nil
})
