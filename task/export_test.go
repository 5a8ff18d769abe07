package task

// DecodeSpecStd is DecodeSpec with the standard library's decoder only.
func DecodeSpecStd(data []byte) (Spec, error) { return decodeSpec(data, false) }
