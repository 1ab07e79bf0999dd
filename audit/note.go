package audit

import "time"

// OCSF Base Event (schema.ocsf.io/1.8.0/classes/base_event, class 0,
// category 0 "Uncategorized"): what the log says about itself (a rotation
// and what it removed), activity 99 Other named "Audit log note".
const (
	BaseClassUID  = 0
	BaseClassName = "Base Event"
)

// BaseEvent is an OCSF Base Event.
type BaseEvent struct {
	Classification
	StatusID int      `json:"status_id"`
	Status   string   `json:"status"`
	Message  string   `json:"message"`
	Metadata Metadata `json:"metadata"`
	Device   Device   `json:"device"`
}

func (BaseEvent) OCSFClassUID() int { return BaseClassUID }

// Note is a Base Event with message msg, severity Low.
func Note(msg string) BaseEvent {
	e := BaseEvent{
		Classification: classify(time.Now(), BaseClassUID, BaseClassName, 0, "Uncategorized", ActivityOther, "Audit log note"),
		StatusID:       StatusSuccess, Status: "Success", Message: msg,
		Metadata: newMetadata(RunInfo{}, hostProfile...), Device: device(),
	}
	e.setSeverity(SeverityLow)
	return e
}
