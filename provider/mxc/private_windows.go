package mxc

import "golang.org/x/sys/windows"

// makePrivate makes directory path the caller's alone, the counterpart of
// mode 0700: a protected DACL (nothing inherited from the parent) with one
// ACE, full control for the caller's user SID, inherited by what is made
// inside (OICI). SetNamedSecurityInfo, "Security Descriptor String
// Format". SYSTEM and Administrators get no ACE: like root, they are not
// kept out in effect (backup and take-ownership privileges).
func makePrivate(path string) error {
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return err
	}
	sid := u.User.Sid.String()
	sd, err := windows.SecurityDescriptorFromString("D:P(A;OICI;FA;;;" + sid + ")")
	if err != nil {
		return err
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return err
	}
	return windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, dacl, nil)
}
