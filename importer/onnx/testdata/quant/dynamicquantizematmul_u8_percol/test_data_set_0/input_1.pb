BbJ­W¹,T…à$  Âa¼D&‘CRÑZÀL
€X@Ý]