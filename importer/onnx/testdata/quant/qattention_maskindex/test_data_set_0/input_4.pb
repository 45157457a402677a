BwsJ
ף;