package engine

// What the stories of package engine_test (the harness on
// policy/nomadmodel) share with the package's own tests: the fixtures,
// and the per-plan properties the over-time test checks at each step.
var (
	T0                    = t0
	TestPolicy            = testPolicy
	TestTenant            = tenant
	Kinds                 = kinds
	ActionOf              = actionOf
	MustContain           = mustContain
	At                    = at
	VictimActions         = victimActions
	GenDepartment         = genDepartment
	CheckVictimsExistOnce = checkVictimsExistOnce
	CheckBeneficiariesFit = checkBeneficiariesFit
)
