BasJH
=